// LoopKernel inspector: live run page over server-sent events. No framework, no build.
// Every HTML fragment comes from the server, rendered with autoescaping; this file only
// places it. Reading works without it: the page is complete as served.
(function () {
  "use strict";
  var root = document.querySelector("[data-live]");
  if (!root || !window.EventSource) return;
  var journal = document.getElementById("journal");
  var dot = document.getElementById("live-dot");
  var source = new EventSource(root.getAttribute("data-live"));

  function fill(id, html) {
    var el = document.getElementById(id);
    if (el && html !== undefined) el.innerHTML = html;
  }
  source.addEventListener("open", function () { if (dot) dot.hidden = false; });
  source.addEventListener("error", function () { if (dot) dot.hidden = true; });
  source.addEventListener("journal", function (e) {
    var msg = JSON.parse(e.data);
    if (document.getElementById("ev-" + msg.seq)) {  // never doubled (the server sends none)
      console.warn("duplicate journal entry", msg.seq);
      return;
    }
    journal.insertAdjacentHTML("beforeend", msg.html);
    var row = document.getElementById("ev-" + msg.seq);
    if (row) row.classList.add("fresh");
  });
  source.addEventListener("patch", function (e) {
    var msg = JSON.parse(e.data);
    var cell = document.querySelector("#ev-" + msg.seq + " td.patch");
    if (cell) cell.outerHTML = msg.html;
  });
  source.addEventListener("state", function (e) {
    var msg = JSON.parse(e.data);
    fill("head", msg.head);
    fill("graph", msg.graph);
    fill("tasks", msg.tasks);
    var actions = document.getElementById("actions");
    // Replace the forms only when what waits changed: never wipe what someone is typing.
    if (actions && actions.getAttribute("data-key") !== msg.actions_key) {
      actions.outerHTML = msg.actions;
    }
    document.body.setAttribute("data-run-status", msg.status);
  });
  source.addEventListener("end", function (e) {
    var msg = JSON.parse(e.data);
    document.body.setAttribute("data-run-status", msg.status);
    document.body.setAttribute("data-stream", "ended");
    source.close();
    if (dot) dot.hidden = true;
  });
})();
