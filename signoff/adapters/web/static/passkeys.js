/* signoff console: passkeys (WebAuthn). No framework.
 *
 * On the Passkeys page, registers a passkey (POST /passkeys/register/options →
 * navigator.credentials.create → POST /passkeys/register) and revokes one. On a card
 * under passkey step-up (form.passkey-form), a press asks for options bound to this
 * request and this answer (GET /approvals/{id}/passkey-options), lets the device sign
 * them (navigator.credentials.get, user verification required) and sends the assertion
 * with the decision (POST /approvals/{id}/approve|deny). Cookie sessions send the CSRF
 * token as X-CSRF-Token, as every cookie-authenticated API call must.
 */
(function () {
  "use strict";

  function say(form, text) {
    var status = form.querySelector(".passkey-status");
    if (status) { status.textContent = text; }
  }

  function call(method, url, csrf, body) {
    var headers = { "Accept": "application/json", "X-CSRF-Token": csrf };
    if (body !== undefined) { headers["Content-Type"] = "application/json"; }
    return fetch(url, {
      method: method, credentials: "same-origin", headers: headers, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) {
          var error = new Error(data.detail || ("HTTP " + response.status));
          error.data = data;
          throw error;
        }
        return data;
      });
    });
  }

  function supported() {
    return window.PublicKeyCredential &&
      typeof PublicKeyCredential.parseRequestOptionsFromJSON === "function";
  }

  function register(form) {
    var section = form.closest("[data-csrf]");
    var csrf = section ? section.getAttribute("data-csrf") : "";
    var name = form.querySelector("input[name=name]").value.trim();
    if (!supported()) { say(form, "This browser cannot use passkeys."); return; }
    say(form, "Follow your device's prompt…");
    call("POST", "/passkeys/register/options", csrf).then(function (options) {
      var publicKey = PublicKeyCredential.parseCreationOptionsFromJSON(options);
      return navigator.credentials.create({ publicKey: publicKey });
    }).then(function (credential) {
      return call("POST", "/passkeys/register", csrf,
        { name: name, credential: credential.toJSON() });
    }).then(function () {
      window.location.reload();
    }).catch(function (error) { say(form, "Not registered: " + error.message); });
  }

  function revoke(button) {
    var section = button.closest("[data-csrf]");
    var csrf = section ? section.getAttribute("data-csrf") : "";
    call("DELETE", "/passkeys/" + encodeURIComponent(button.getAttribute("data-revoke")),
      csrf).then(function () { window.location.reload(); })
      .catch(function (error) { button.textContent = error.message; });
  }

  function decide(form, decision) {
    var id = form.getAttribute("data-approval");
    var csrf = form.getAttribute("data-csrf");
    var base = "/approvals/" + encodeURIComponent(id);
    if (!supported()) { say(form, "This browser cannot use passkeys."); return; }
    say(form, "Confirm with your passkey…");
    call("GET", base + "/passkey-options?decision=" + encodeURIComponent(decision), csrf)
      .then(function (options) {
        var publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options);
        return navigator.credentials.get({ publicKey: publicKey });
      }).then(function (assertion) {
        var body = { passkey: assertion.toJSON() };
        var reason = form.querySelector("input[name=reason]");
        var lasts = form.querySelector("select[name=for]");
        if (decision === "deny") {
          if (reason && reason.value.trim()) { body.reason = reason.value.trim(); }
          return call("POST", base + "/deny", csrf, body);
        }
        body.scope = decision;
        if (lasts && lasts.value && decision !== "once") { body["for"] = lasts.value; }
        return call("POST", base + "/approve", csrf, body);
      }).then(function (status) {
        say(form, "Decided: " + status.status);
        window.location.reload();
      }).catch(function (error) {
        var hint = error.data && error.data.register ? " (Passkeys page: " +
          error.data.register + ")" : "";
        say(form, "Not decided: " + error.message + hint);
      });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.id === "passkey-register") {
      event.preventDefault();
      register(form);
    } else if (form.classList && form.classList.contains("passkey-form")) {
      event.preventDefault();
      var decision = event.submitter ? event.submitter.value : "once";
      decide(form, decision);
    }
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-revoke]") : null;
    if (button) { revoke(button); }
  });
}());
