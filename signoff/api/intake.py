"""The two intake routes, ``POST /tasks`` and ``POST /v1/approvals``, answered without
FastAPI's per-request machinery when the request is well-formed.

Why: an agent submits at the rate it works, and on those two routes FastAPI's layers
(exception and exit-stack middleware, matching every route, solving dependencies,
parsing the body to a dict and then validating the dict, re-validating the answer) cost
more than the handler itself (bench/throughput.py, issue 29). `IntakeMiddleware` sits
inside `AuthMiddleware` (and `GuardMiddleware`: the size and depth bounds have applied)
and hands such a request to its `FastPost`, which validates the raw JSON body once
(``model_validate_json``) and calls the same handler code as the FastAPI route.

Only well-formed requests take this path. Anything else goes on to FastAPI unchanged
(the body replayed), so every refusal keeps its exact words: no caller identity (401),
a role that may not call the route (403, `access.may_call`), a body not sent as JSON or
that fails validation (FastAPI's 422), a bad header (``Idempotency-Key``). The FastAPI
routes stay registered for that and for ``/openapi.json``. A handler's own errors
(`ApiError`, `StoreError`) are answered as FastAPI's exception handlers answer them
(`errors.error_response`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from signoff.api.access import may_call
from signoff.api.auth import Identity
from signoff.api.errors import error_response, is_json
from signoff.api.middleware import replay

# (caller, raw JSON body, headers) → the answer, or None to let the FastAPI route answer.
FastPost = Callable[[Identity, bytes, Headers], Awaitable[Response | None]]


class IntakeMiddleware:
    """See the module docstring; ``routes`` maps a path to its `FastPost` (POST only)."""

    def __init__(self, app: ASGIApp, *, routes: Mapping[str, FastPost], ctx: object) -> None:
        self.app = app
        self.routes = dict(routes)
        self.ctx = ctx  # the ApiContext, for a database outage (errors.store_failed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.routes.get(scope["path"]) if scope["type"] == "http" else None
        if handler is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        who = scope.get("state", {}).get("identity")
        headers = Headers(scope=scope)
        if (not isinstance(who, Identity) or not may_call(who, "POST", scope["path"])
                or not is_json(headers.get("content-type"))):
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return  # the client went away while sending
        try:
            response = await handler(who, body, headers)
        except Exception as exc:
            response = error_response(exc, scope["path"], self.ctx)
            if response is None:
                raise  # GuardMiddleware logs it and answers 500
        if response is None:
            await self.app(scope, replay(body, receive), send)
            return
        await response(scope, receive, send)


async def _body(receive: Receive) -> bytes | None:
    """The whole body (already bounded by `GuardMiddleware`); None on a disconnect."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


