"""Guards in front of every route: body size, foreign origins, rebinding, crashes.

One pure ASGI middleware, outermost of ours:
- a request body over ``max_body`` bytes gets 413, whether it says so in Content-Length
  or only turns out that long while streaming (the body is read here, up to the limit,
  and replayed to the app, so no handler ever sees a partial or oversized body);
- a JSON body nested deeper than `bounds.MAX_DEPTH` levels gets 422 naming the field
  (whatever the route: nothing that deep is ever stored, see `signoff.runtime.bounds`);
- a state-changing request whose Origin (or Referer) is another site gets 403: a page
  elsewhere cannot make a logged-in browser approve anything;
- in the keyless loopback mode only direct requests from this machine are answered
  (`keyless_refusal`): a Host header that is not loopback (a DNS rebinding page, or a
  reverse proxy forwarding the public host), a client address that is not loopback, or
  any proxy header (``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``) gets 403 — a proxy
  in front of a keyless daemon would otherwise make the whole internet ``web:local``;
  and a connection another local account opened gets 403 too (`signoff.local_user`):
  ``web:local`` is the person who runs the daemon, not everyone with a shell on its host;
- any exception becomes 500 ``{"detail": "internal error"}``; the traceback goes to the
  log, never into a response.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from signoff.api.errors import invalid, is_json
from signoff.local_user import CONNECTION, Connection, owner_refusal
from signoff.net import is_loopback
from signoff.runtime.bounds import MAX_BYTES, MAX_DEPTH, OutOfBounds, parse_json

log = logging.getLogger(__name__)

MAX_BODY = MAX_BYTES
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Headers a reverse proxy adds: a request carrying one did not come straight from a
# person on this machine, whatever its socket's address says.
PROXY_HEADERS = ("forwarded", "x-real-ip", "x-forwarded-")


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of a URL, default ports dropped; None if not a URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS[parts.scheme]:
        host = f"{host}:{port}"
    return f"{parts.scheme}://{host}"


# What a keyed daemon answers without a key is no secret from other local accounts either
# (a monitoring agent running as its own user may ask whether the daemon is up).
ANY_ACCOUNT = frozenset({"/health"})


def keyless_refusal(scope: Scope, headers: Headers, *, any_local_user: bool = False
                    ) -> str | None:
    """Why a request may not act as ``web:local`` (None: a direct loopback request from
    the daemon's own user).

    The Host must be a loopback name (never ``daemon.public_url``'s host: that is how a
    reverse proxy addresses us), the peer a loopback address, no proxy header may be
    present, and the client's socket must belong to the daemon's user (or root) unless
    ``any_local_user`` (`signoff.local_user`)."""
    for name, _ in scope.get("headers", ()):
        lowered = name.decode("latin-1").lower()
        if lowered.startswith(PROXY_HEADERS):
            return f"it came through a proxy: {lowered}"
    client = scope.get("client")
    if not client or not is_loopback(str(client[0])):
        return f"it came from {client[0] if client else 'an unknown address'}"
    host = headers.get("host")
    hostname = urlsplit(f"//{host}").hostname if host else None
    if host and (hostname is None or not is_loopback(hostname)):
        return f"it was addressed to {host}"
    if not any_local_user and scope.get("path") not in ANY_ACCOUNT:
        connection = scope.get(CONNECTION)
        if isinstance(connection, Connection) and connection.owned:
            return None  # this connection's owner was asked already (see Connection)
        why = owner_refusal(client, scope.get("server"))
        if why is None and isinstance(connection, Connection):
            connection.owned = True
        return why
    return None


def _error(status: int, detail: str) -> Response:
    return JSONResponse({"detail": detail}, status_code=status)


class GuardMiddleware:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, *, max_body: int = MAX_BODY, loopback_only: bool = False,
                 any_local_user: bool = False, trusted_origins: Iterable[str] = (),
                 unguarded: Iterable[str] = ()) -> None:
        self.app = app
        self.max_body = max_body
        self.loopback_only = loopback_only
        self.any_local_user = any_local_user
        self.trusted = {o for o in (origin_of(u) for u in trusted_origins) if o}
        self.unguarded = frozenset(unguarded)  # chat webhooks: they carry their own signatures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is None and scope["method"] not in SAFE_METHODS:
                body = await self._read_body(scope, receive)
                if isinstance(body, Response):
                    refusal = body
                elif body is None:
                    return  # the client went away while sending
                else:
                    refusal = _unbounded(scope, body)
                    receive = replay(body, receive)
            if refusal is not None:
                await refusal(scope, receive, tracked)
                return
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("request_failed", extra={"method": scope.get("method"),
                                                   "path": scope.get("path")})
            if not started:
                await _error(500, "internal error")(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        if scope["path"] in self.unguarded:
            return None
        headers = Headers(scope=scope)
        if self.loopback_only:
            why = keyless_refusal(scope, headers, any_local_user=self.any_local_user)
            if why is not None:
                return _error(403, f"this daemon has no api.key, so it only answers direct "
                                   f"requests to 127.0.0.1 or localhost from the user it "
                                   f"runs as on this machine ({why}); set api.key to reach "
                                   f"it any other way")
        if scope["method"] in SAFE_METHODS:
            return None
        if headers.get("sec-fetch-site") == "cross-site":
            return _error(403, "cross-site request refused")
        claimed = headers.get("origin")
        if claimed is None and headers.get("referer"):
            claimed = headers["referer"]
        if claimed is None:
            return None  # not a browser (curl, the CLI): nothing to check
        origin = origin_of(claimed)
        if origin is None or origin not in self._own_origins(scope, headers):
            return _error(403, "cross-origin request refused")
        return None

    def _own_origins(self, scope: Scope, headers: Headers) -> set[str]:
        own = set(self.trusted)
        host = headers.get("host")
        if host:
            mine = origin_of(f"{scope.get('scheme', 'http')}://{host}")
            if mine:
                own.add(mine)
        return own

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | Response | None:
        declared = Headers(scope=scope).get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                return _error(400, "invalid Content-Length header")
            if int(declared) > self.max_body:
                return _too_large(self.max_body)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return _too_large(self.max_body)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _unbounded(scope: Scope, body: bytes) -> Response | None:
    """422 for a JSON body nested too deep (malformed JSON is left to the route's own
    error, which says what is wrong with it)."""
    if not is_json(Headers(scope=scope).get("content-type")):
        return None
    # A body with few brackets cannot nest deeply: no parse on the common path.
    if body.count(b"{") + body.count(b"[") <= MAX_DEPTH:
        return None
    try:
        parse_json(body, "")  # fields named as in every 422: "args.a", "steps[0].args"
    except OutOfBounds as exc:
        return invalid(exc.field, exc.problem).response()
    except ValueError:  # not JSON, or not UTF-8
        return None
    return None


def _too_large(limit: int) -> Response:
    return JSONResponse({"detail": f"request body too large (limit {limit} bytes)"},
                        status_code=413, headers={"Connection": "close"})


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the buffered body over once, then passes through (disconnects)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
