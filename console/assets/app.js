// aileron-proxy console: live refresh through server-sent events (the
// server says what changed; the page never polls) and the waiting/time-left
// clocks. Forms work without this script.
(function () {
  "use strict";
  var page = document.body.getAttribute("data-page");
  var wants = { approvals: ["approvals"], sessions: ["sessions", "audit"], audit: ["audit"] }[page] || [];
  var live = document.getElementById("live");
  var busy = false, again = false;

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var q = new URLSearchParams(location.search);
    q.set("fragment", "1");
    fetch(location.pathname + "?" + q.toString(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) { document.getElementById("main").innerHTML = html; tick(); })
      .catch(function () { live.textContent = "offline"; })
      .finally(function () { busy = false; if (again) { again = false; refresh(); } });
  }

  function fmt(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    return s >= 60 ? Math.floor(s / 60) + "m" + (s % 60) + "s" : s + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-since]").forEach(function (el) {
      el.textContent = fmt(now - Number(el.getAttribute("data-since")));
    });
    document.querySelectorAll("[data-until]").forEach(function (el) {
      el.textContent = fmt(Number(el.getAttribute("data-until")) - now);
    });
  }

  if (window.EventSource) {
    // The stream compares against the state the page was rendered from, so
    // a change between the page load and the stream's start still shows.
    var es = new EventSource("/ui/events?state=" + encodeURIComponent(document.body.getAttribute("data-state") || ""));
    es.onopen = function () { live.textContent = "live"; live.className = "live on"; };
    es.onerror = function () { live.textContent = "offline"; live.className = "live"; };
    wants.forEach(function (name) { es.addEventListener(name, refresh); });
  }
  document.addEventListener("change", function (ev) {
    var f = ev.target.form;
    if (f && f.id === "filters" && ev.target.tagName === "SELECT") { f.submit(); }
  });
  setInterval(tick, 1000);
})();
