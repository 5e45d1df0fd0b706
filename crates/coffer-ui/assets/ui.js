// coffer ui: live figures pushed by /api/v1/events. Every page works without
// this script (those showing something going on reload themselves then).
(function () {
  "use strict";
  var watch = document.querySelector("[data-watch]");
  var live = Array.prototype.slice.call(document.querySelectorAll("[data-live]"));
  if ((!watch && live.length === 0) || !window.EventSource) return;
  var shown = live.map(function (el) { return el.getAttribute("data-live"); });
  var es = new EventSource("/api/v1/events");
  es.addEventListener("progress", function (e) {
    var d;
    try { d = JSON.parse(e.data); } catch (err) { return; }
    var now = {};
    d.live.forEach(function (x) { now[x.key] = x; });
    // Something shown here ended, or something this page lists began: draw it again.
    var ended = shown.some(function (k) { return !now[k]; });
    var began = watch && d.live.some(function (x) {
      return x.page === watch.getAttribute("data-watch") && shown.indexOf(x.key) < 0;
    });
    if (ended || began) { es.close(); window.location.reload(); return; }
    live.forEach(function (el) {
      var x = now[el.getAttribute("data-live")];
      el.querySelector(".figures").textContent = x.text;
      var p = el.querySelector("progress");
      if (p && x.fraction !== null) p.value = x.fraction;
    });
  });
})();
