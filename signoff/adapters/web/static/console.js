/* signoff console: live updates over server-sent events, countdowns. No framework.
 *
 * The page works without this script (plain forms, full reloads). With it, the element
 * #live is re-fetched from its data-src whenever the server announces a change on
 * /events, so new requests and decisions made elsewhere appear without a reload.
 */
(function () {
  "use strict";

  function formatLeft(ms) {
    var s = Math.floor(ms / 1000);
    if (s <= 0) { return "expired"; }
    if (s < 60) { return "expires in " + s + " s"; }
    var m = Math.floor(s / 60);
    if (m < 60) { return "expires in " + m + " min"; }
    var h = Math.floor(m / 60);
    m = m % 60;
    return "expires in " + h + " h" + (m ? " " + m + " min" : "");
  }

  // A held card's countdown to its release (its Undo window); "running now" at zero.
  function formatHold(ms) {
    var s = Math.ceil(ms / 1000);
    if (s <= 0) { return "running now"; }
    if (s < 60) { return "runs in " + s + " s"; }
    return "runs in " + Math.floor(s / 60) + " min " + (s % 60) + " s";
  }

  function countdown(attribute, format) {
    var nodes = document.querySelectorAll("[" + attribute + "]");
    for (var i = 0; i < nodes.length; i++) {
      var at = Date.parse(nodes[i].getAttribute(attribute));
      if (!isNaN(at)) { nodes[i].textContent = format(at - Date.now()); }
    }
  }

  function tick() {
    countdown("data-expires", formatLeft);
    countdown("data-hold", formatHold);
  }

  var live = document.getElementById("live");
  var pending = null;
  var busy = false;
  var again = false;

  function refresh() {
    if (!live) { return; }
    if (busy) { again = true; return; }
    busy = true;
    fetch(live.getAttribute("data-src"), {
      credentials: "same-origin",
      headers: { "Accept": "text/html" },
      cache: "no-store"
    }).then(function (response) {
      if (response.status === 401) { window.location.reload(); return null; }
      return response.ok ? response.text() : null;
    }).then(function (html) {
      if (html !== null && html !== live.innerHTML && !editing()) {
        live.innerHTML = html;
        tick();
      }
    }).catch(function () { /* the next event or tick retries */ }).then(function () {
      busy = false;
      if (again) { again = false; schedule(); }
    });
  }

  // Someone typing a reason, choosing how long a grant lasts or editing args: a refresh
  // would throw their work away, so it waits (the next event after they are done shows it).
  function editing() {
    var el = document.activeElement;
    if (el && live.contains(el) && (el.tagName === "TEXTAREA" || el.tagName === "SELECT" ||
        (el.tagName === "INPUT" && el.value))) { return true; }
    if (live.querySelector("details.edit[open]")) { return true; }
    var choices = live.querySelectorAll("select");
    for (var i = 0; i < choices.length; i++) {
      if (choices[i].selectedIndex > 0) { return true; }
    }
    return false;
  }

  function schedule() {
    if (pending) { clearTimeout(pending); }
    pending = setTimeout(refresh, 100);
  }

  if (live && window.EventSource) {
    var source = new EventSource("/events");
    source.addEventListener("refresh", schedule);
    source.addEventListener("hello", function () {
      document.body.classList.add("connected");
      // Changes between rendering this page and opening the stream (or while it was
      // reconnecting) announce nothing: refresh once on every (re)connect.
      schedule();
    });
    source.onerror = function () { document.body.classList.remove("connected"); };
  }
  tick();
  setInterval(tick, 1000);
}());
