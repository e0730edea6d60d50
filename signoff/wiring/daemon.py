"""The daemon's composition: the node, its surfaces and API, and every service it runs.

`assemble` builds them in dependency order, each given what it needs at construction;
`signoff daemon start` (`signoff.cli.daemon`) binds the port, calls it and runs the
services until it is stopped.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from signoff.bot.ports import Route, Surface, SurfaceDeps
from signoff.bot.surfaces import Surfaces
from signoff.config.settings import Settings, proxy_network
from signoff.errors import ConfigError
from signoff.local_user import CONNECTION, Connection
from signoff.net import is_loopback
from signoff.runtime.clock import SystemClock
from signoff.runtime.daemon import Service, open_patiently
from signoff.runtime.models import RiskClass
from signoff.runtime.state import server_secret
from signoff.wiring.api import api_keys, api_providers, api_roles, forget_stale_subscriptions
from signoff.wiring.cluster import cluster_ports, cluster_services
from signoff.wiring.node import Node, build_node
from signoff.wiring.state import prepare_state
from signoff.wiring.surfaces import PendingCards, build_surfaces

# How long an idle keep-alive connection stays open. uvicorn's default (5 s) is exactly
# httpx's `keepalive_expiry` (5 s): a client reusing a connection near 5 s idle sent its
# request just as the server closed it, and got a ReadError for a request never read
# (about once in 2,000-4,000 POST /tasks under bench/cluster.py). The server must keep an
# idle connection longer than clients do, so that the client is the one to drop it.
KEEP_ALIVE_SECONDS = 75


class _ConnectionProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (one object per TCP connection) that also puts the
    connection's `Connection` in each request's scope: the keyless owner check asks the
    kernel once per connection instead of once per request (signoff.local_user)."""

    _connection: Connection | None = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._connection is None:
            self._connection = Connection()
        self.scope[CONNECTION] = self._connection  # type: ignore[literal-required]


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server_config(app: Any, host: str, port: int,
                  trusted_proxies: Sequence[str] = ()) -> uvicorn.Config:
    """uvicorn's settings for the daemon (see `KEEP_ALIVE_SECONDS`).

    ``httptools`` (a dependency), not uvicorn's pure-Python h11: it parses a request in C,
    and parsing was a large share of a small request's cost (bench/cluster.py); through
    `_ConnectionProtocol`, which tells each request which connection it came on.

    Forwarded headers are believed only from ``trusted_proxies`` (``daemon.
    trusted_proxies``). uvicorn's own default believes them from 127.0.0.1: any local
    process could then name a new address for each wrong console key it tried, and the
    sign-in limit, counted per address, would never apply."""
    return uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                          access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS,
                          log_config=None,  # its records reach our handler (masked)
                          http=_ConnectionProtocol, proxy_headers=bool(trusted_proxies),
                          # normalised: uvicorn takes "10.0.0.1/8" for a name, not a network
                          forwarded_allow_ips=[str(proxy_network(p)) for p in trusted_proxies]
                          or None)


def http_service(node: Node, app: Any, host: str, port: int,
                 sock: socket.socket | None = None) -> Service:
    """Serve the API and console inside the daemon's event loop (on ``sock`` when the
    port was bound early, see `signoff.cli.daemon.bind_port`)."""
    async def serve() -> None:
        server = _Server(server_config(app, host, port,
                                       node.settings.daemon.trusted_proxies))
        try:
            await server.serve(sockets=[sock] if sock is not None else None)
        finally:
            server.should_exit = True
    return serve


def surface_routes(surfaces: dict[str, Surface]) -> list[Route]:
    """The HTTP routes of the running surfaces, each under its own ``/<name>/``.

    They are served without the API key (each checks its platform's own signature), so a
    surface may not claim a path of the API's or another surface's.
    """
    routes: list[Route] = []
    for name, surface in surfaces.items():
        for route in surface.routes():
            if not route.path.startswith(f"/{name}/"):
                raise ConfigError(f"surface {name!r} serves {route.method} {route.path}: a "
                                  f"surface's routes must be under /{name}/")
            routes.append(route)
    return routes


async def assemble(settings: Settings, *, host: str, port: int, work_dir: Path | None,
                   database: str | None, autonomous_risks: list[RiskClass] | None,
                   sock: socket.socket | None = None
                   ) -> tuple[Node, list[tuple[str, Service]]]:
    """The node plus every service the daemon runs next to its worker."""
    from signoff.adapters.web.surface import WebSurface
    from signoff.api.app import create_app
    from signoff.api.context import ApiContext
    from signoff.api.metrics import MetricsListener

    clock = SystemClock()
    public_url = settings.daemon.public_url or f"http://{host}:{port}"
    # The state dir is prepared (and a 0.2 layout moved in) once, before anything reads
    # the node id, the secret or the database from it.
    state = prepare_state(settings, work_dir)
    # The surfaces and the node's flow need each other (a surface lists and looks up the
    # node's cards; the flow and the post_message tool deliver through the surfaces): the
    # node gets the table they share empty, and it is filled once the surfaces can be
    # given the node's parts. Nothing reads it before the services start.
    table: dict[str, Surface] = {}
    node = build_node(settings, work_dir=work_dir, database=database, clock=clock,
                      autonomous_risks=autonomous_risks, surfaces=table, state=state)
    ports = cluster_ports(settings, work_dir=work_dir, database=database, clock=clock,
                          state=state, outages=node.engine.outages)
    pending = PendingCards(node)
    table.update(build_surfaces(settings, deps=SurfaceDeps(
        clock=clock, pending=pending, lookup=pending.lookup, public_url=public_url,
        leadership=ports.leadership, replay=ports.replay, secret=server_secret(state),
        state_dir=state, subscriptions=pending)))
    web = table.get("web")
    if not isinstance(web, WebSurface):  # the console is the API's own surface
        raise ConfigError("the web surface is not registered (reinstall signoff)")
    await open_patiently(node.store, node.engine.outages, settings.daemon.db_outage_limit)
    keys = api_keys(settings)
    await forget_stale_subscriptions(node.store, settings, local=is_loopback(host))
    # A refused token leaves that surface out (logged); a failing Slack or Telegram is
    # retried while the other surfaces run, and /health says which is which.
    surfaces = Surfaces(surfaces=node.surfaces, dispatcher=node.flow.dispatcher,
                        clock=node.clock)
    await surfaces.check_all()
    metrics = MetricsListener()
    node.listener.add(metrics)
    extra = surface_routes(node.surfaces)
    schedules, oncall, scheduler_services = api_providers(node)
    ctx = ApiContext(store=node.store, engine=node.engine, decider=node.decider, flow=node.flow,
                     clock=node.clock, wake=node.worker.wake, keys=keys,
                     roles=api_roles(settings), session_ttl=settings.api.session_ttl,
                     sign_in_attempts=settings.api.sign_in_attempts,
                     local_no_key=not keys and is_loopback(host),
                     local_any_user=settings.api.keyless_any_local_user, web=web,
                     public_url=public_url,
                     extra_routes=extra, schedules=schedules, oncall=oncall, metrics=metrics,
                     surfaces=surfaces.health,
                     mcp_status=node.mcp.status if node.mcp else None)
    app = create_app(ctx)
    services: list[tuple[str, Service]] = [("http", http_service(node, app, host, port, sock)),
                                           ("outbox", node.flow.dispatcher.run)]
    for name in node.surfaces:
        services.append((f"surface-{name}", surfaces.service(name, node.flow.on_decision)))
    services.extend(scheduler_services)
    services.extend(cluster_services(node))
    services.extend(ports.services)
    if node.mcp:  # cancelled with the daemon, which stops every server it started
        services.append(("mcp", node.mcp.run))
    return node, services
