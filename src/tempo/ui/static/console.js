// The console's only script of its own (docs/ui.md): live refresh by
// Server-Sent Events, and countdowns. Every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  if (window.EventSource) {
    var source = new EventSource("/ui/live");
    source.onmessage = function () {
      document.body.dispatchEvent(new Event("tempo-change"));
    };
  }
  function words(s) {
    var a = Math.abs(Math.round(s)), out = [];
    [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]].forEach(function (u) {
      if (a >= u[1] && out.length < 2) { out.push(Math.floor(a / u[1]) + u[0]); a %= u[1]; }
    });
    var w = out.join(" ") || "0s";
    return s < 0 ? w + " ago" : "in " + w;
  }
  setInterval(function () {
    document.querySelectorAll(".countdown[data-at]").forEach(function (el) {
      el.textContent = words((Date.parse(el.dataset.at) - Date.now()) / 1000);
    });
  }, 1000);
});
