// LoopKernel inspector: live pages over server-sent events. No framework, no build.
// Every HTML fragment comes from the server, rendered with autoescaping; this file only
// places it. Reading works without it: every page is complete as served.
(function () {
  "use strict";

  // One live stream per browser: every tab's views go through one SharedWorker
  // (static/shared.js), which holds one EventSource for all of them. Without
  // SharedWorker (or with it refused), each view opens an EventSource of its own.
  var worker = null;
  var views = {};
  function sharedPort() {
    if (worker === null) {
      worker = false;
      if (window.SharedWorker) {
        try {
          worker = new SharedWorker("/static/shared.js", { name: "loopkernel-live" });
          worker.port.addEventListener("message", function (m) {
            var view = views[m.data.id];
            if (view) view(m.data);
          });
          worker.port.start();
        } catch (e) { worker = false; }
      }
    }
    return worker ? worker.port : null;
  }
  // An EventSource's face (addEventListener, close, readyState) over the shared stream.
  function SharedSource(port, url, runs) {
    var id = Math.random().toString(36).slice(2) + Date.now().toString(36);
    var handlers = {};
    var me = {
      readyState: 0,
      addEventListener: function (type, fn) { (handlers[type] = handlers[type] || []).push(fn); },
      close: function () { port.postMessage({ op: "unwatch", id: id }); delete views[id]; me.readyState = 2; }
    };
    views[id] = function (msg) {
      if (msg.type === "error") me.readyState = JSON.parse(msg.data).state === "closed" ? 2 : 0;
      else me.readyState = 1;
      (handlers[msg.type] || []).forEach(function (fn) { fn({ data: msg.data }); });
    };
    port.postMessage({ op: "watch", id: id, url: url, runs: !!runs });
    return me;
  }
  function openSource(url, runs) {
    var port = sharedPort();
    document.body.setAttribute("data-stream-mode", port ? "shared" : "own");
    if (port) return SharedSource(port, url, runs);
    return runs ? null : new EventSource(url);
  }
  window.addEventListener("pagehide", function () {
    Object.keys(views).forEach(function (id) {
      worker.port.postMessage({ op: "unwatch", id: id });
    });
    views = {};
  });

  // The runs list: its first page reads its rows again when some journal moved (told on
  // the shared stream), else every few seconds.
  var runsBody = document.querySelector("#runs-body[data-poll]");
  if (runsBody && window.fetch) {
    // A change told while a read is in flight may be after what that read saw: read once
    // more when it lands (again), never drop it.
    var busy = false, again = false;
    var reload = function () {
      if (busy) { again = true; return; }
      busy = true;
      again = false;
      fetch(runsBody.getAttribute("data-poll"), { credentials: "same-origin" })
        .then(function (r) {
          if (!r.ok) return null;
          var counts = r.headers.get("X-Run-Counts");
          return r.text().then(function (html) { return { html: html, counts: counts }; });
        })
        .then(function (got) {
          // The rows and the chips change together: never counts ahead of their rows.
          if (got === null) return;
          runsBody.innerHTML = got.html;
          if (got.counts) setCounts(JSON.parse(got.counts));
          document.body.setAttribute("data-runs-polled", String(Date.now()));
        })
        .catch(function () {})
        .then(function () { busy = false; if (again) reload(); });
    };
    // The status chips: each one's count, and "all" their sum, as the server counted them.
    var setCounts = function (counts) {
      var all = 0;
      Object.keys(counts).forEach(function (k) { all += counts[k]; });
      document.querySelectorAll(".chips [data-count]").forEach(function (el) {
        var key = el.getAttribute("data-count");
        var n = String(key === "all" ? all : (counts[key] || 0));
        if (el.textContent !== n) el.textContent = n;
      });
    };
    var told = openSource(null, true);
    if (told) {
      told.addEventListener("runs", reload);
      reload();  // what changed between this page's render and its subscription
    } else setInterval(reload, 3000);
  }

  // Durations that move while a run runs ("running for", "waiting for"): the server
  // renders each with the epoch it counts from and its own clock's now; this page counts
  // on from there (by the server's clock, whatever this machine's says).
  function duration(s) {
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    s = Math.floor(s);
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  }
  var skew = null;  // server now - this machine's now, seconds
  function tick() {
    var clocks = document.querySelectorAll("[data-since]");
    for (var i = 0; i < clocks.length; i++) {
      var el = clocks[i];
      var now = parseFloat(el.getAttribute("data-now"));
      if (skew === null && !isNaN(now)) skew = now - Date.now() / 1000;
      var since = parseFloat(el.getAttribute("data-since"));
      if (!isNaN(since)) el.textContent = duration(Math.max(0, Date.now() / 1000 + (skew || 0) - since));
    }
  }
  if (document.querySelector("[data-since]")) setInterval(tick, 1000);

  var root = document.querySelector("[data-live]");
  if (!root || !window.EventSource) return;
  var journal = document.getElementById("journal");
  var dot = document.getElementById("live-dot");
  var lost = document.getElementById("stream-lost");
  var keepalive = parseFloat(root.getAttribute("data-keepalive") || "15") * 1000;
  var url = root.getAttribute("data-live");
  var source = null;
  var lastMessage = Date.now();
  var ended = false;
  var JOURNAL_WINDOW = parseInt(root.getAttribute("data-window") || "500", 10);

  function fill(id, html) {
    var el = document.getElementById(id);
    if (el && html !== undefined) el.innerHTML = html;
  }
  function alive() {
    lastMessage = Date.now();
    if (lost) lost.hidden = true;
    document.body.setAttribute("data-stream", "live");
  }
  function dead(why) {
    if (ended) return;
    if (dot) dot.hidden = true;
    if (lost) lost.hidden = false;
    document.body.setAttribute("data-stream", why);
  }
  function byAttr(attr, value) {
    return document.querySelector("[" + attr + '="' + CSS.escape(value) + '"]');
  }

  function connect() {
    source = openSource(url, false);
    source.addEventListener("open", function () { if (dot) dot.hidden = false; alive(); });
    source.addEventListener("error", function () {
      // CONNECTING: the browser retries by itself (with Last-Event-ID); CLOSED: it gave up.
      dead(source.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
    });
    source.addEventListener("keepalive", function () {
      alive();
      var n = parseInt(document.body.getAttribute("data-keepalives") || "0", 10) + 1;
      document.body.setAttribute("data-keepalives", String(n));
    });
    source.addEventListener("journal", function (e) {
      alive();
      var msg = JSON.parse(e.data);
      if (document.getElementById("ev-" + msg.seq)) {  // never doubled (the server sends none)
        console.warn("duplicate journal entry", msg.seq);
        return;
      }
      journal.insertAdjacentHTML("beforeend", msg.html);
      // The live journal keeps a window: the oldest rows leave the DOM (the full
      // journal is ?journal=all, and the download).
      var over = journal.children.length - JOURNAL_WINDOW;
      for (; over > 0; over--) journal.removeChild(journal.firstElementChild);
      var row = document.getElementById("ev-" + msg.seq);
      if (row) row.classList.add("fresh");
      // a reconnect goes on from the last row this page has
      url = url.replace(/after=\d+/, "after=" + msg.seq);
    });
    // A stream more than a window behind the head (this page did not read fast enough,
    // or came back after long) is sent the live window only: say what it skipped, with a
    // link to those rows; the DOM window stays as it is.
    source.addEventListener("catchup", function (e) {
      alive();
      var msg = JSON.parse(e.data);
      var row = document.createElement("tr");
      row.className = "catchup";
      row.id = "skip-" + msg.from + "-" + msg.to;
      var cell = document.createElement("td");
      cell.colSpan = 6;
      cell.textContent = "skipped " + msg.skipped + " events (" + msg.from + "\u2013" + msg.to + ") \u2014 ";
      var link = document.createElement("a");
      link.href = url.split("/events")[0] + "?journal=all#ev-" + msg.from;
      link.textContent = "load them";
      cell.appendChild(link);
      row.appendChild(cell);
      journal.appendChild(row);
      var over = journal.children.length - JOURNAL_WINDOW;
      for (; over > 0; over--) journal.removeChild(journal.firstElementChild);
      var n = parseInt(document.body.getAttribute("data-skipped") || "0", 10) + msg.skipped;
      document.body.setAttribute("data-skipped", String(n));
      url = url.replace(/after=\d+/, "after=" + msg.to);
    });
    source.addEventListener("patch", function (e) {
      alive();
      var msg = JSON.parse(e.data);
      var cell = document.querySelector("#ev-" + msg.seq + " td.patch");
      if (cell) cell.outerHTML = msg.html;
    });
    source.addEventListener("state", function (e) {
      alive();
      var msg = JSON.parse(e.data);
      fill("head", msg.head);
      fill("failures-slot", msg.failures);
      if (msg.graph !== undefined) fill("graph", msg.graph);
      if (msg.boxes) {
        Object.keys(msg.boxes).forEach(function (key) {
          var box = byAttr("data-box", key);
          if (box) box.outerHTML = msg.boxes[key];
        });
      }
      if (msg.tasks) {
        var body = document.getElementById("task-rows");
        Object.keys(msg.tasks).forEach(function (id) {
          var row = document.getElementById("task-" + id);
          if (row) row.outerHTML = msg.tasks[id];
          else if (body && body.hasAttribute("data-open")) {
            var none = body.querySelector("tr.none");
            if (none) none.remove();
            body.insertAdjacentHTML("beforeend", msg.tasks[id]);
          }
        });
      }
      var actions = document.getElementById("actions");
      // Replace the forms only when what waits changed: never wipe what someone is typing.
      if (actions && msg.actions !== undefined && actions.getAttribute("data-key") !== msg.actions_key) {
        actions.outerHTML = msg.actions;
      }
      document.body.setAttribute("data-run-status", msg.status);
    });
    source.addEventListener("end", function (e) {
      var msg = JSON.parse(e.data);
      ended = true;
      document.body.setAttribute("data-run-status", msg.status);
      document.body.setAttribute("data-stream", "ended");
      source.close();
      if (dot) dot.hidden = true;
      if (lost) lost.hidden = true;
    });
  }
  connect();

  // A stream that went silent for three keepalives is dead even if the socket looks open
  // (a proxy, a sleeping laptop): say so, and open a new one.
  setInterval(function () {
    if (ended || Date.now() - lastMessage < 3 * keepalive) return;
    dead("silent");
    source.close();
    lastMessage = Date.now();
    connect();
  }, Math.max(250, keepalive / 2));
})();
