"""What the HTTP app needs from a node: the store, the engine, the flow, keys, surfaces.

`create_app` takes one `ApiContext` and nothing else. The wiring builds it from a node
(`signoff.wiring.api_context` computes the keys and the no-key-on-loopback rule from the
config, which the API never reads itself); tests build it the same way around a node on a
temporary database.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from signoff.bot.flow import ApprovalFlow
from signoff.bot.ports import Route
from signoff.runtime.clock import Clock
from signoff.runtime.decisions import Decider
from signoff.runtime.engine import Engine
from signoff.runtime.store.port import TaskStore

if TYPE_CHECKING:
    from signoff.adapters.web.surface import WebSurface
    from signoff.api.metrics import MetricsListener

SchedulesProvider = Callable[[], Awaitable[list[dict[str, Any]]]]
OncallProvider = Callable[[datetime | None], Awaitable[dict[str, Any]]]
McpStatus = Callable[[], dict[str, str]]  # {"git": "up" | "starting" | "down: …"}

ADMIN = "admin"


@dataclass
class ApiContext:
    """Everything the API and the console use; see the module docstring."""

    store: TaskStore
    engine: Engine
    decider: Decider
    flow: ApprovalFlow
    clock: Clock
    wake: Callable[[], None]  # called after a submit so the worker claims it at once
    web: WebSurface
    keys: dict[str, str] = field(default_factory=dict)  # API key -> actor name
    # actor name -> "admin" | "approver" | "requester" (signoff.api.access; unlisted: approver)
    roles: dict[str, str] = field(default_factory=dict)
    local_no_key: bool = False  # no key configured and loopback host: callers are web:local
    # ... and that caller may be any local account, not only the daemon's own (opt-in)
    local_any_user: bool = False
    public_url: str | None = None
    session_ttl: timedelta = timedelta(hours=12)  # a console sign-in lasts this long
    sign_in_attempts: int = 5  # failed console sign-ins per client address per minute
    extra_routes: list[Route] = field(default_factory=list)  # the surfaces' own; no key
    schedules: SchedulesProvider | None = None
    oncall: OncallProvider | None = None
    metrics: MetricsListener | None = None  # None: create_app makes one and listens with it
    surfaces: Callable[[], dict[str, str]] | None = None  # chat surface -> ok/degraded/disabled
    mcp_status: McpStatus | None = None  # None: no MCP servers configured
