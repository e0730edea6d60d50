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

  // The multi-select checkboxes survive a refresh of the live region: a card ticked a
  // moment ago stays ticked when another request arrives.
  function selected() {
    var ticked = {};
    var boxes = document.querySelectorAll("input[name=ids]:checked");
    for (var i = 0; i < boxes.length; i++) { ticked[boxes[i].value] = true; }
    return ticked;
  }

  function reselect(ticked) {
    var boxes = document.querySelectorAll("input[name=ids]");
    for (var i = 0; i < boxes.length; i++) {
      if (ticked[boxes[i].value]) { boxes[i].checked = true; }
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
        var ticked = selected();
        live.innerHTML = html;
        reselect(ticked);
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

  // -- the installable app and its notifications ------------------------------------
  // The service worker makes the console installable and shows the notifications the
  // daemon pushes (when [webpush] is enabled: GET /webpush/key answers). The #push panel
  // turns them on or off for this browser, for the person signed in.
  var panel = document.getElementById("push");
  var PUSH_ID = "signoff-push-id";

  function b64ToBytes(text) {
    var pad = "=".repeat((4 - text.length % 4) % 4);
    var raw = atob((text + pad).replace(/-/g, "+").replace(/_/g, "/"));
    var out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { out[i] = raw.charCodeAt(i); }
    return out;
  }

  function say(text, on) {
    panel.querySelector(".push-state").textContent = text;
    var button = panel.querySelector("button");
    button.textContent = on ? "Turn off" : "Enable notifications";
    button.setAttribute("data-on", on ? "1" : "");
  }

  function send(method, url, body) {
    return fetch(url, {
      method: method, credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json", "Accept": "application/json",
                 "X-CSRF-Token": panel.getAttribute("data-csrf") },
      body: body ? JSON.stringify(body) : undefined
    }).then(function (response) {
      return response.json().then(function (json) {
        if (!response.ok) { throw new Error(json.detail || ("HTTP " + response.status)); }
        return json;
      });
    });
  }

  function enable(registration, key) {
    return Notification.requestPermission().then(function (permission) {
      if (permission !== "granted") { throw new Error("notifications are blocked for this site"); }
      return registration.pushManager.subscribe({
        userVisibleOnly: true, applicationServerKey: b64ToBytes(key) });
    }).then(function (subscription) {
      return send("POST", "/webpush/subscriptions", subscription.toJSON());
    }).then(function (saved) {
      localStorage.setItem(PUSH_ID, saved.id);
      say("Notifications are on for " + saved.holder + " on this device.", true);
    });
  }

  function disable(registration) {
    var id = localStorage.getItem(PUSH_ID);
    localStorage.removeItem(PUSH_ID);
    var gone = id ? send("DELETE", "/webpush/subscriptions/" + encodeURIComponent(id))
      .catch(function () { return null; }) : Promise.resolve(null);
    return gone.then(function () { return registration.pushManager.getSubscription(); })
      .then(function (subscription) { return subscription && subscription.unsubscribe(); })
      .then(function () { say("Notifications are off on this device.", false); });
  }

  function setUpPush(registration) {
    if (!panel || !window.PushManager || !window.Notification) { return; }
    fetch("/webpush/key", { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (answer) {
        if (!answer) { return; }
        panel.hidden = false;
        var on = Notification.permission === "granted" && localStorage.getItem(PUSH_ID);
        say(on ? "Notifications are on on this device." :
          "Get each request you may decide as a notification, with Once and Deny.", on);
        panel.querySelector("button").addEventListener("click", function () {
          var busy = this.getAttribute("data-on") ? disable(registration) :
            enable(registration, answer.public_key);
          busy.catch(function (error) {
            say("Could not turn notifications on: " + error.message, false);
          });
        });
      }).catch(function () { /* no push here: the panel stays hidden */ });
  }

  if ("serviceWorker" in navigator) {
    navigator.serviceWorker.register("/static/sw.js", { scope: "/" })
      .then(function () { return navigator.serviceWorker.ready; })
      .then(setUpPush)
      .catch(function () { /* no service worker (plain http off localhost): no app */ });
  }
}());
