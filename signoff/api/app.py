"""The daemon's one ASGI app: the JSON API, the web console and the chat webhooks.

    app = create_app(api_context(settings, store=node.store, ...))  # signoff.wiring
    await uvicorn.Server(uvicorn.Config(app, ...)).serve()

Layers, outermost first: `GuardMiddleware` (413, foreign origins, crashes → 500),
`AuthMiddleware` (401 unless a key, the console cookie or the keyless loopback mode),
`IntakeMiddleware` (a well-formed ``POST /tasks`` or ``POST /v1/approvals`` answered by
the routes' own handlers without FastAPI's per-request machinery), then the role gate
every route depends on (`signoff.api.access`: 403 for a key whose role may not call
it), then the routes. The chat surfaces' own routes (`Surface.routes`: Slack's events,
Telegram's webhook) are mounted as given, outside our auth: they check their own
signatures.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import Depends, FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from signoff._version import __version__
from signoff.adapters.web import pages
from signoff.api import access, approvals, console, errors, passkeys, routes
from signoff.api.access import Role
from signoff.api.auth import Authenticator, AuthMiddleware, SessionRules
from signoff.api.context import ApiContext
from signoff.api.intake import FastPost, IntakeMiddleware
from signoff.api.longpoll import LongPolls
from signoff.api.metrics import MetricsListener
from signoff.api.middleware import GuardMiddleware
from signoff.api.routes import KEYS_PATH
from signoff.bot.ports import Caller, Endpoint
from signoff.runtime.events import MultiListener

PUBLIC_PATHS = frozenset({"/health", KEYS_PATH})


def attach_metrics(ctx: ApiContext) -> MetricsListener:
    """The context's metrics listener, or a new one listening to the engine's events."""
    if ctx.metrics is not None:
        return ctx.metrics
    metrics = MetricsListener()
    listener = ctx.engine.listener
    if isinstance(listener, MultiListener):
        listener.add(metrics)
    ctx.metrics = metrics
    return metrics


def _errors_are_json(operation: dict[str, Any]) -> None:
    # FastAPI files a text route's (e.g. /metrics) error models under text/plain; every
    # error this app sends is JSON.
    for status, response in operation.get("responses", {}).items():
        content = response.get("content", {})
        if status[0] in "45" and "text/plain" in content and "application/json" not in content:
            content["application/json"] = content.pop("text/plain")


def document_auth(app: FastAPI) -> None:
    """Declare the bearer key in /openapi.json (the check itself is `AuthMiddleware`)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = generate()
        schema.setdefault("components", {})["securitySchemes"] = {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "api.key (acts as web:admin) or a [[api.keys]] key (web:<name>)"}}
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                if path not in PUBLIC_PATHS:
                    operation["security"] = [{"bearer": []}]
                _errors_are_json(operation)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def signed_in(endpoint: Endpoint) -> Endpoint:
    """A surface's ``signed_in`` route: past `AuthMiddleware` (a key or the console's
    cookie with its CSRF header), for people who may decide (403 for a requester key);
    the endpoint reads who from ``request.state.caller``."""

    async def guarded(request: Request) -> Response:
        who = request.state.identity
        if not access.may_decide(who):
            return JSONResponse({"detail": f"{who.actor} holds a {who.role.value} key, "
                                           "which may not decide"}, status_code=403)
        request.state.caller = Caller(actor=who.actor)
        return await endpoint(request)

    return guarded


# FastAPI 0.165 and later trace every request into OpenTelemetry's global providers by
# themselves (and look them up on every request). signoff exports only what its
# [telemetry] section asks, through providers of its own (runtime/telemetry.py): a
# global provider set by a host process must not receive spans of the approvals API
# (paths with request ids, timings) that nobody configured.
NO_NATIVE_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


def create_app(ctx: ApiContext) -> FastAPI:
    """Build the app for one node (see the module docstring)."""
    metrics = attach_metrics(ctx)
    auth = Authenticator(ctx.keys, local_no_key=ctx.local_no_key, store=ctx.store,
                         clock=ctx.clock,
                         rules=SessionRules(ttl=ctx.session_ttl, attempts=ctx.sign_in_attempts),
                         roles={name: Role(role) for name, role in ctx.roles.items()})
    # Every route passes the role gate (signoff.api.access): a requester key reaches only
    # the routes listed there, whatever router a route comes from.
    app = FastAPI(title="signoff", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json", dependencies=[Depends(access.gate)],
                  description="Approval-gated autonomy: tasks, decisions, audit.",
                  **NO_NATIVE_TELEMETRY)
    app.state.ctx = ctx
    app.state.auth = auth
    app.state.metrics = metrics
    fast: dict[str, FastPost] = {}  # the intake routes' well-formed requests, see below
    app.include_router(routes.build_router(ctx, metrics, fast))
    app.include_router(approvals.build_router(ctx, fast))
    app.include_router(passkeys.build_router(ctx))
    app.include_router(console.build_router(ctx, auth))
    extra = [route.path for route in ctx.extra_routes if not route.signed_in]
    for route in ctx.extra_routes:
        endpoint = signed_in(route.endpoint) if route.signed_in else route.endpoint
        app.add_route(route.path, endpoint, methods=[route.method], include_in_schema=False)
    errors.install(app)
    document_auth(app)
    open_paths = PUBLIC_PATHS | set(extra)

    def is_public(method: str, path: str) -> bool:
        if path in open_paths or path.startswith("/static/"):
            return True
        return method == "POST" and path == "/login"

    # Innermost of ours: a parked long poll keeps the auth frame, not the route's stack.
    app.add_middleware(LongPolls, watch=ctx.decider.watch)
    # Inside AuthMiddleware, so it sees the caller it established and a body the
    # guards have bounded; it answers before FastAPI's routing (signoff.api.intake).
    app.add_middleware(IntakeMiddleware, routes=fast, ctx=ctx)
    app.add_middleware(AuthMiddleware, auth=auth, public=is_public, login_page=pages.login_page,
                       public_url=ctx.public_url)
    app.add_middleware(GuardMiddleware, loopback_only=ctx.local_no_key,
                       any_local_user=ctx.local_any_user,
                       trusted_origins=[ctx.public_url] if ctx.public_url else [],
                       unguarded=extra)
    return app
