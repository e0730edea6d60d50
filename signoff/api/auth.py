"""Who is calling: bearer keys, the console's session cookie, the keyless loopback mode.

Every request except /health, /static/*, the login form and the chat platforms' own
endpoints passes `AuthMiddleware`, which puts an `Identity` in ``request.state`` or
answers 401 (JSON for API clients, the login page for browsers). Keys are compared with
`hmac.compare_digest` against every configured key, never with an early exit.

The console cookie holds a session token derived from the key with HMAC (never the key
itself), so every node sharing the config accepts it and changing a key signs everybody
out. A CSRF token is derived from the session the same way (double submit: the forms
carry it in a hidden field; cookie-authenticated API calls send it as ``X-CSRF-Token``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE = "signoff_session"
CSRF_HEADER = "x-csrf-token"
SESSION_MAX_AGE = 30 * 24 * 3600
_SESSION_LABEL = b"signoff console session v1"
_CSRF_LABEL = b"signoff csrf v1"
LOCAL = "local"
# Console pages: no inline script or style, no framing, nothing from other origins.
HTML_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: ``web:<name>``, via a bearer key, the cookie or loopback."""

    name: str
    via: str  # bearer | cookie | local
    session: str  # what the CSRF token is derived from

    @property
    def actor(self) -> str:
        """The audit actor, e.g. ``web:admin``."""
        return f"web:{self.name}"


def _mac(key: bytes, label: bytes) -> str:
    return hmac.new(key, label, hashlib.sha256).hexdigest()


def cookie_secure(scope: Scope, public_url: str | None) -> bool:
    """Mark the cookie Secure when the console is served over https."""
    return scope.get("scheme") == "https" or bool(public_url and public_url.startswith("https:"))


class Authenticator:
    """Checks keys, session tokens and CSRF tokens."""

    def __init__(self, keys: Mapping[str, str], *, local_no_key: bool,
                 secret: bytes | None = None) -> None:
        self._keys = [(key.encode(), name) for key, name in keys.items()]
        self._sessions = [(_mac(key, _SESSION_LABEL), name) for key, name in self._keys]
        self.local = local_no_key and not self._keys
        # Only the keyless loopback mode needs a secret of its own (there is no key).
        self._secret = secret or secrets.token_bytes(32)

    @property
    def has_keys(self) -> bool:
        """True when at least one key is configured."""
        return bool(self._keys)

    def by_key(self, key: str) -> Identity | None:
        """The identity holding ``key`` (constant-time against every key)."""
        given = key.encode()
        found: str | None = None
        for stored, name in self._keys:
            if hmac.compare_digest(given, stored) and found is None:
                found = name
        return Identity(found, "bearer", self.session_for(key)) if found else None

    def session_for(self, key: str) -> str:
        """The cookie value for a console signed in with ``key``."""
        return _mac(key.encode(), _SESSION_LABEL)

    def by_session(self, token: str) -> Identity | None:
        """The identity of a session cookie."""
        found: str | None = None
        for stored, name in self._sessions:
            if hmac.compare_digest(token.encode(), stored.encode()) and found is None:
                found = name
        return Identity(found, "cookie", token) if found else None

    def identify(self, headers: Headers) -> Identity | None:
        """Bearer key first, then the console cookie, then the keyless loopback mode."""
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip() and self._keys:
            return self.by_key(value.strip())
        token = session_cookie(headers)
        if token:
            found = self.by_session(token)
            if found:
                return found
        if self.local:
            return Identity(LOCAL, "local", LOCAL)
        return None

    def csrf_token(self, identity: Identity) -> str:
        """The CSRF token of a session (HMAC of the session, so every node agrees)."""
        key = self._secret if identity.via == "local" else identity.session.encode()
        return _mac(key, _CSRF_LABEL)[:40]

    def check_csrf(self, identity: Identity, token: str | None) -> bool:
        """True when ``token`` is this session's CSRF token."""
        return bool(token) and hmac.compare_digest(str(token).encode(),
                                                   self.csrf_token(identity).encode())


def session_cookie(headers: Headers) -> str | None:
    """The session cookie's value, if any."""
    raw = headers.get("cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed Cookie header is the client's problem: ignore it
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel else None


def set_session(response: Response, token: str, *, secure: bool) -> None:
    """Set the console cookie: HttpOnly, SameSite=Strict, never readable by scripts."""
    response.set_cookie(COOKIE, token, max_age=SESSION_MAX_AGE, path="/", httponly=True,
                        samesite="strict", secure=secure)


def unauthorized(headers: Headers, path: str, login_page: Callable[..., str],
                 error: str | None = None) -> Response:
    """401: the login page for a browser, JSON for everyone else."""
    accept = headers.get("accept", "")
    if "text/html" in accept and "application/json" not in accept:
        return HTMLResponse(login_page(error=error, next_path=path), status_code=401,
                            headers={**HTML_HEADERS, "WWW-Authenticate": "Bearer"})
    detail = error or "missing or invalid API key: send 'Authorization: Bearer <key>'"
    return JSONResponse({"detail": detail}, status_code=401,
                        headers={"WWW-Authenticate": "Bearer"})


class AuthMiddleware:
    """Puts ``request.state.identity`` on every request, or answers 401.

    ``GET /?key=<key>`` signs the console in: a valid key sets the cookie and redirects
    to ``/`` (so the key leaves the address bar at once); a wrong one gets the login page.
    """

    def __init__(self, app: ASGIApp, *, auth: Authenticator, public: Callable[[str, str], bool],
                 login_page: Callable[..., str], public_url: str | None = None) -> None:
        self.app = app
        self.auth = auth
        self.public = public
        self.login_page = login_page
        self.public_url = public_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        headers = Headers(scope=scope)
        if method == "GET" and path == "/" and "key" in _query(scope):
            await self._login_by_query(scope, headers)(scope, receive, send)
            return
        identity = self.auth.identify(headers)
        if identity is not None:
            if (identity.via == "cookie" and method not in ("GET", "HEAD", "OPTIONS")
                    and not path.startswith(("/console/", "/login", "/logout"))
                    and not self.auth.check_csrf(identity, headers.get(CSRF_HEADER))):
                # Forms check their hidden field; API calls riding the cookie need the header.
                await JSONResponse({"detail": "missing or wrong X-CSRF-Token header"},
                                   status_code=403)(scope, receive, send)
                return
            scope.setdefault("state", {})["identity"] = identity
            await self.app(scope, receive, send)
            return
        if self.public(method, path):
            await self.app(scope, receive, send)
            return
        error = None
        if not self.auth.has_keys and not self.auth.local:
            error = ("this daemon has no api.key configured and is not on loopback: "
                     "set api.key to use the API")
        await unauthorized(headers, path, self.login_page, error)(scope, receive, send)

    def _login_by_query(self, scope: Scope, headers: Headers) -> Response:
        key = (_query(scope).get("key") or [""])[0]
        if self.auth.local:
            return RedirectResponse("/", status_code=303)
        identity = self.auth.by_key(key) if key else None
        if identity is None:
            return unauthorized(headers, "/", self.login_page, "That key is not valid.")
        response = RedirectResponse("/", status_code=303,
                                    headers={"Referrer-Policy": "no-referrer",
                                             "Cache-Control": "no-store"})
        set_session(response, identity.session, secure=cookie_secure(scope, self.public_url))
        return response


def _query(scope: Scope) -> dict[str, list[str]]:
    return parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


def safe_next(value: str | None) -> str:
    """A local path to go back to after a login or a decision (never another site)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value
