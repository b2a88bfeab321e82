// The Investigations page: the inspector's live.js follows the run's stream; when the
// stream ends (the run finished), reload once to show the report.
(function () {
  "use strict";
  if (!document.querySelector("[data-live][data-reload-on-end]")) return;
  var body = document.body;
  new MutationObserver(function () {
    if (body.getAttribute("data-stream") === "ended") window.location.reload();
  }).observe(body, { attributes: true, attributeFilter: ["data-stream"] });
})();
