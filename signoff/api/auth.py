"""Who is calling: bearer keys, the console's session cookie, the keyless loopback mode.

Every request except /health, /static/*, the login form and the chat platforms' own
endpoints passes `AuthMiddleware`, which puts an `Identity` in ``request.state`` or
answers 401 (JSON for API clients, the login page for browsers). Keys are compared with
`hmac.compare_digest` against every configured key, never with an early exit.

The console cookie holds a random session token; the store keeps its hash, the key
holder's name and when it expires (`Authenticator`), so every node accepts it, signing
out ends it everywhere, and changing a key signs its holder out. Failed sign-ins are
limited per client address (`SignInLimiter`, 429 with ``Retry-After``). A CSRF token is
derived from the session with HMAC (double submit: the forms carry it in a hidden field;
cookie-authenticated API calls send it as ``X-CSRF-Token``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from signoff.api.access import DEFAULT_ROLE, Role, may_use_console
from signoff.runtime.clock import Clock
from signoff.runtime.store.port import ConsoleSession, TaskStore

log = logging.getLogger(__name__)

COOKIE = "signoff_session"
CSRF_HEADER = "x-csrf-token"
_SESSION_LABEL = b"signoff console session v1"
_KEY_ID_LABEL = b"signoff console key id v1"
_CSRF_LABEL = b"signoff csrf v1"
LOCAL = "local"
REQUESTER_NO_CONSOLE = ("That is a requester key: it submits requests over the API but "
                        "cannot use the console.")
# Console pages: no inline script or style, no framing, nothing from other origins.
HTML_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "manifest-src 'self'; worker-src 'self'; "
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
    role: Role = DEFAULT_ROLE

    @property
    def actor(self) -> str:
        """The audit actor, e.g. ``web:admin``."""
        return f"web:{self.name}"


def _mac(key: bytes, label: bytes) -> str:
    return hmac.new(key, label, hashlib.sha256).hexdigest()


def cookie_secure(scope: Scope, public_url: str | None) -> bool:
    """Mark the cookie Secure when the console is served over https."""
    return scope.get("scheme") == "https" or bool(public_url and public_url.startswith("https:"))


@dataclass(frozen=True)
class SessionRules:
    """How long a console session lasts and how many failed sign-ins an address gets."""

    ttl: timedelta = timedelta(hours=12)
    attempts: int = 5  # failed sign-ins per client address within `window`
    window: timedelta = timedelta(minutes=1)


class SignInRefused(Exception):
    """A sign-in that did not open a session: 401 wrong key, 403 requester, 429 too many."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class SignInLimiter:
    """Failed sign-ins per client address in a sliding window, by the node's Clock.

    Per node and in memory: a guesser spread over N nodes gets N times the attempts,
    which keys of 128 bits (required off loopback) make no difference to."""

    def __init__(self, *, clock: Clock, rules: SessionRules, capacity: int = 10_000) -> None:
        self.clock = clock
        self.rules = rules
        self.capacity = capacity
        self._failures: dict[str, deque[datetime]] = {}

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again, or None when it may now."""
        now = self.clock.now()
        recent = self._recent(client, now)
        if len(recent) < self.rules.attempts:
            return None
        wait = (recent[0] + self.rules.window - now).total_seconds()
        return max(1, math.ceil(wait))

    def failed(self, client: str) -> None:
        """Count one failed sign-in of ``client``."""
        now = self.clock.now()
        recent = self._recent(client, now)
        if not recent and len(self._failures) >= self.capacity:
            # Full: forget the address whose last failure is oldest (a flood of
            # addresses must not grow memory without bound).
            oldest = min(self._failures, key=lambda c: self._failures[c][-1])
            del self._failures[oldest]
        self._failures.setdefault(client, recent).append(now)

    def _recent(self, client: str, now: datetime) -> deque[datetime]:
        recent = self._failures.get(client, deque())
        while recent and recent[0] <= now - self.rules.window:
            recent.popleft()
        if not recent:
            self._failures.pop(client, None)
        return recent


def session_id(token: str) -> str:
    """What the store keeps of a session token: its SHA-256 (a leaked table signs nobody in)."""
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    """Checks keys, console sessions and CSRF tokens; opens and ends sessions.

    A console session is a random token in the cookie and a row in the store (shared by
    every node): signing out deletes the row, so a copied cookie stops working at once;
    a session expires ``rules.ttl`` after sign-in (the node's Clock), and one opened with
    a key that has since changed or gone is refused.
    """

    def __init__(self, keys: Mapping[str, str], *, local_no_key: bool, store: TaskStore,
                 clock: Clock, rules: SessionRules = SessionRules(),
                 secret: bytes | None = None, roles: Mapping[str, Role] | None = None) -> None:
        self._keys = [(key.encode(), name) for key, name in keys.items()]
        self._roles = dict(roles or {})
        self._key_ids: dict[str, set[str]] = {}
        for key, name in self._keys:
            self._key_ids.setdefault(name, set()).add(_mac(key, _KEY_ID_LABEL)[:32])
        self.local = local_no_key and not self._keys
        self.store = store
        self.clock = clock
        self.rules = rules
        self.limiter = SignInLimiter(clock=clock, rules=rules)
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
        return (Identity(found, "bearer", _mac(given, _SESSION_LABEL), self.role_of(found))
                if found else None)

    def role_of(self, name: str) -> Role:
        """The role of the key named ``name`` (``[[api.keys]]`` without one: approver)."""
        return self._roles.get(name, DEFAULT_ROLE)

    async def by_session(self, token: str) -> Identity | None:
        """The identity of a live session cookie (None: unknown, ended, expired, or its
        key changed)."""
        found = await self.store.console_session(session_id(token))
        if found is None or found.expires_at <= self.clock.now():
            return None
        if found.key_id not in self._key_ids.get(found.holder, ()):
            return None
        return Identity(found.holder, "cookie", token, self.role_of(found.holder))

    async def identify(self, headers: Headers) -> Identity | None:
        """Bearer key first, then the console cookie, then the keyless loopback mode."""
        auth = headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip() and self._keys:
            return self.by_key(value.strip())
        token = session_cookie(headers)
        if token and self._keys:
            found = await self.by_session(token)
            if found:
                return found
        if self.local:
            return Identity(LOCAL, "local", LOCAL, Role.ADMIN)
        return None

    async def sign_in(self, key: str, client: str) -> str:
        """Open a console session for ``key``; returns the cookie's token. Raises
        `SignInRefused` (429 while ``client`` has failed too often, 401 for a wrong key,
        403 for a requester key)."""
        wait = self.limiter.retry_after(client)
        if wait is not None:
            log.warning("console_sign_in_limited", extra={"client": client, "retry_after": wait})
            raise SignInRefused(429, f"Too many failed sign-ins from this address: try "
                                     f"again in {wait} s.", wait)
        identity = self.by_key(key) if key else None
        if identity is None:
            self.limiter.failed(client)
            log.info("console_sign_in_failed", extra={"client": client})
            raise SignInRefused(401, "That key is not valid.")
        if not may_use_console(identity):
            raise SignInRefused(403, REQUESTER_NO_CONSOLE)
        token = secrets.token_urlsafe(32)
        now = self.clock.now()
        await self.store.open_session(ConsoleSession(
            id=session_id(token), holder=identity.name,
            key_id=_mac(key.encode(), _KEY_ID_LABEL)[:32], expires_at=now + self.rules.ttl),
            now=now)
        return token

    async def sign_out(self, identity: Identity) -> None:
        """End a cookie session on every node (other identities have none)."""
        if identity.via == "cookie":
            await self.store.end_session(session_id(identity.session))

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


def set_session(response: Response, token: str, *, secure: bool, ttl: timedelta) -> None:
    """Set the console cookie: HttpOnly, SameSite=Strict, never readable by scripts; the
    browser drops it when the session expires (the store is what actually ends it)."""
    response.set_cookie(COOKIE, token, max_age=int(ttl.total_seconds()), path="/",
                        httponly=True, samesite="strict", secure=secure)


def client_address(scope: Scope) -> str:
    """The peer's address (what sign-ins are counted by)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def sign_in_refused(headers: Headers, path: str, login_page: Callable[..., str],
                    refusal: SignInRefused, *, form: bool = False) -> Response:
    """The answer to a refused sign-in: the login page (always, for the login ``form``;
    else JSON unless a browser asks) with its status, and ``Retry-After`` when limited."""
    if form:
        response: Response = HTMLResponse(login_page(error=refusal.message, next_path=path),
                                          status_code=refusal.status, headers=HTML_HEADERS)
    else:
        response = unauthorized(headers, path, login_page, refusal.message)
        response.status_code = refusal.status
    if refusal.retry_after is not None:
        response.headers["Retry-After"] = str(refusal.retry_after)
    if refusal.status != 401 and "WWW-Authenticate" in response.headers:
        del response.headers["WWW-Authenticate"]
    return response


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
            await (await self._login_by_query(scope, headers))(scope, receive, send)
            return
        identity = await self.auth.identify(headers)
        if (identity is not None and identity.via == "cookie"
                and method not in ("GET", "HEAD", "OPTIONS")
                and not path.startswith(("/console/", "/login", "/logout"))
                and not self.auth.check_csrf(identity, headers.get(CSRF_HEADER))
                and self.public(method, path)):
            # A route that needs nobody (an e-mail link's form, a notification's token)
            # goes on as anonymous: the cookie confers nothing there, so no CSRF header
            # is due — a person signed in to the console may still follow a mail link.
            identity = None
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

    async def _login_by_query(self, scope: Scope, headers: Headers) -> Response:
        key = (_query(scope).get("key") or [""])[0]
        if self.auth.local:
            return RedirectResponse("/", status_code=303)
        try:
            token = await self.auth.sign_in(key, client_address(scope))
        except SignInRefused as refusal:
            return sign_in_refused(headers, "/", self.login_page, refusal)
        response = RedirectResponse("/", status_code=303,
                                    headers={"Referrer-Policy": "no-referrer",
                                             "Cache-Control": "no-store"})
        set_session(response, token, secure=cookie_secure(scope, self.public_url),
                    ttl=self.auth.rules.ttl)
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
