// LoopKernel inspector: one live stream per browser. Every tab's live views (run pages,
// the runs list) subscribe here; this SharedWorker holds ONE EventSource on /live that
// carries them all, so ten tabs cost one connection, not ten (a browser allows six per
// host over HTTP/1.1). When a view joins or leaves, the stream is opened again with the
// new set, each run page's view from the last seq its tab has: none lost, none doubled.
"use strict";
var subs = {};      // id -> {port, url, runs}
var source = null;
var pending = null;
var TYPES = ["journal", "catchup", "patch", "state", "keepalive", "end", "runs"];

function each(fn) { Object.keys(subs).forEach(function (id) { fn(id, subs[id]); }); }

function send(id, type, data) {
  var s = subs[id];
  if (s) s.port.postMessage({ id: id, type: type, data: data });
}

function connect() {
  pending = null;
  if (source) { source.close(); source = null; }
  var list = [];
  each(function (id, s) { list.push(s.runs ? { id: id, runs: true } : { id: id, url: s.url }); });
  if (!list.length) return;
  var es = source = new EventSource("/live?subs=" + encodeURIComponent(JSON.stringify(list)));
  es.addEventListener("open", function () { each(function (id) { send(id, "open", "{}"); }); });
  es.addEventListener("error", function () {
    var state = es.readyState === EventSource.CLOSED ? "closed" : "reconnecting";
    each(function (id) { send(id, "error", JSON.stringify({ state: state })); });
    // Never the browser's own retry: it would reopen the first URL, whose `after`s are
    // stale (the shared stream carries no Last-Event-ID). Reopen with each view's last seq.
    if (source === es) { es.close(); later(1000); }
  });
  TYPES.forEach(function (type) {
    es.addEventListener(type, function (e) {
      var msg = JSON.parse(e.data);
      var s = subs[msg.sub];
      if (!s) return;
      // a reconnect goes on from the last row this view has
      if (type === "journal" && s.url) s.url = s.url.replace(/after=\d+/, "after=" + msg.seq);
      if (type === "catchup" && s.url) s.url = s.url.replace(/after=\d+/, "after=" + msg.to);
      send(msg.sub, type, e.data);
      if (type === "end") { delete subs[msg.sub]; later(50); }
    });
  });
}

function later(ms) {
  if (pending !== null) clearTimeout(pending);
  pending = setTimeout(connect, ms);
}

self.addEventListener("connect", function (e) {
  var port = e.ports[0];
  port.addEventListener("message", function (m) {
    var msg = m.data || {};
    if (msg.op === "watch") {
      subs[msg.id] = { port: port, url: msg.url || null, runs: !!msg.runs };
      later(30);  // tabs opened together share one reconnect
    } else if (msg.op === "unwatch") {
      if (subs[msg.id]) { delete subs[msg.id]; later(30); }
    }
  });
  port.start();
});
