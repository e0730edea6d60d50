/* signoff console service worker: installs the PWA and shows approval notifications.
 *
 * A push message is JSON made by the daemon (signoff/adapters/webpush/payloads.py):
 * {kind, tag, title, body, url, decide, actions: [{action, title, token?}]}. An action
 * with a token posts it to `decide` — the token alone says which request, which decision
 * and whose (single use; a stale one is refused and the answer is shown). Any other tap
 * opens the request's console page. No cookie goes with the token (credentials: "omit").
 */
"use strict";

self.addEventListener("install", function () { self.skipWaiting(); });
self.addEventListener("activate", function (event) {
  event.waitUntil(self.clients.claim());
});

function show(message) {
  var actions = (message.actions || []).map(function (a) {
    return { action: a.action, title: a.title };
  });
  var tokens = {};
  (message.actions || []).forEach(function (a) { if (a.token) { tokens[a.action] = a.token; } });
  return self.registration.showNotification(message.title || "signoff", {
    body: message.body || "",
    tag: message.tag,
    renotify: message.kind === "card",
    requireInteraction: message.kind === "card",
    silent: message.kind !== "card",
    actions: actions,
    data: { url: message.url || "/", decide: message.decide || "", tokens: tokens }
  });
}

self.addEventListener("push", function (event) {
  var message;
  try { message = event.data ? event.data.json() : null; } catch (e) { message = null; }
  if (!message) { return; }
  event.waitUntil(show(message));
});

function openPage(url) {
  return self.clients.matchAll({ type: "window", includeUncontrolled: true }).then(
    function (list) {
      for (var i = 0; i < list.length; i++) {
        if (list[i].url === url && "focus" in list[i]) { return list[i].focus(); }
      }
      return self.clients.openWindow(url);
    });
}

/* What a tap does: decide with the action's token, or open the console page. Returns
 * the daemon's answer ({accepted, message}) so that it can be shown (and tested). */
function handleClick(notification, action) {
  var data = notification.data || {};
  var token = (data.tokens || {})[action];
  notification.close();
  if (!token || !data.decide) { return openPage(data.url || "/").then(function () { return null; }); }
  return fetch(data.decide, {
    method: "POST", credentials: "omit", cache: "no-store",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: token })
  }).then(function (response) {
    return response.json();
  }).catch(function () {
    return { accepted: false, message: "Could not reach signoff; open the console." };
  }).then(function (answer) {
    return self.registration.showNotification(answer.accepted ? "Done" : "Not decided", {
      body: answer.message, tag: notification.tag, silent: true,
      data: { url: data.url, tokens: {} }
    }).then(function () { return answer; });
  });
}
self.handleClick = handleClick;

self.addEventListener("notificationclick", function (event) {
  event.waitUntil(handleClick(event.notification, event.action));
});
