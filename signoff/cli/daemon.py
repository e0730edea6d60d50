"""`signoff daemon start`: build the node and its surfaces, serve, shut down cleanly.

SIGTERM/SIGINT first stop claiming new work and give the tasks in flight
``daemon.shutdown_grace`` (10 s) to finish, then cancel everything; whatever was cut
short is recovered on the next start (requeued, or back to a person if a gated action
was interrupted).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from signoff.bot.ports import Route, Surface, SurfaceDeps
from signoff.bot.surfaces import Surfaces
from signoff.config import preflight
from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.net import is_loopback
from signoff.runtime.clock import SystemClock
from signoff.runtime.daemon import Daemon, Service, open_patiently
from signoff.runtime.models import RiskClass
from signoff.runtime.outages import OutageTooLong
from signoff.runtime.state import server_secret
from signoff.wiring import (
    Node,
    PendingCards,
    api_keys,
    api_providers,
    api_roles,
    build_node,
    build_registry,
    build_surfaces,
    cluster_ports,
    cluster_services,
    forget_stale_subscriptions,
    prepare_state,
)

log = logging.getLogger(__name__)
# How long an idle keep-alive connection stays open. uvicorn's default (5 s) is exactly
# httpx's `keepalive_expiry` (5 s): a client reusing a connection near 5 s idle sent its
# request just as the server closed it, and got a ReadError for a request never read
# (about once in 2,000-4,000 POST /tasks under bench/cluster.py). The server must keep an
# idle connection longer than clients do, so that the client is the one to drop it.
KEEP_ALIVE_SECONDS = 75
OUTAGE_EXIT = 3  # the database was away longer than daemon.db_outage_limit


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server_config(app: Any, host: str, port: int) -> uvicorn.Config:
    """uvicorn's settings for the daemon (see `KEEP_ALIVE_SECONDS`).

    ``httptools`` (a dependency), not uvicorn's pure-Python h11: it parses a request in C,
    and parsing was a large share of a small request's cost (bench/cluster.py)."""
    return uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                          access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS,
                          log_config=None,  # its records reach our handler (masked)
                          http="httptools")


def bind_port(host: str, port: int) -> socket.socket:
    """The daemon's listening socket, bound before anything else happens (no node is
    registered, no surface touched, no poller lease taken when the port is taken):
    ConfigError naming the address when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on an accepted connection only when
    # the listening socket says it is TCP; without it, a response written in two pieces
    # waited ~40 ms for the client's delayed ACK (Nagle), on every request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc})"
        raise ConfigError(f"{host}:{port} {why}: stop what listens there, or start with "
                          "--port (or daemon.port) set to a free port") from exc
    sock.set_inheritable(True)
    return sock


def http_service(node: Node, app: Any, host: str, port: int,
                 sock: socket.socket | None = None) -> Service:
    """Serve the API and console inside the daemon's event loop (on ``sock`` when the
    port was bound early, see `bind_port`)."""
    async def serve() -> None:
        server = _Server(server_config(app, host, port))
        try:
            await server.serve(sockets=[sock] if sock is not None else None)
        finally:
            server.should_exit = True
    return serve


async def run_daemon(settings: Settings, *, host: str | None, port: int | None,
                     work_dir: Path | None, database: str | None, reset: bool,
                     autonomous_risks: list[RiskClass] | None,
                     config_path: Path | None = None) -> int:
    """Run until SIGTERM/SIGINT; return the exit code.

    Refuses to start (ConfigError listing every problem) on what `signoff config check`
    reports: both run `signoff.config.preflight`.
    """
    registry = build_registry(settings, work_dir)
    preflight.check(settings, registry, path=config_path, host=host)
    for notice in preflight.notices(settings, registry, path=config_path):
        log.warning(f"config_notice {notice}")
    host = host or settings.daemon.host
    port = port or settings.daemon.port
    sock = bind_port(host, port)
    try:
        node, services = await assemble(settings, host=host, port=port, work_dir=work_dir,
                                        database=database,
                                        autonomous_risks=autonomous_risks, sock=sock)
    except OutageTooLong as exc:
        log.error("signoff_exiting", extra={"reason": str(exc)})
        return OUTAGE_EXIT
    if reset:
        counts = await node.store.reset()
        log.warning("store_reset " + " ".join(f"{k.replace(' ', '_')}={v}"
                                              for k, v in counts.items()))
    daemon = Daemon(engine=node.engine, worker=node.worker, decider=node.decider,
                    services=services, db_outage_limit=settings.daemon.db_outage_limit)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    main = asyncio.create_task(daemon.run(), name="daemon")
    log.info(f"signoff_started url=http://{host}:{port}/ work_dir={node.work_dir} "
             f"state_dir={settings.resolved_state_dir(work_dir)} "
             f"surfaces={','.join(node.surfaces) or 'none'}")
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not main.done():
        log.info("signoff_stopping")
        node.worker.pause()
        await node.worker.drain(settings.daemon.shutdown_grace.total_seconds())
        main.cancel()
    stopper.cancel()
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await main
    except OutageTooLong as exc:
        log.error("signoff_exiting", extra={"reason": str(exc)})
        return OUTAGE_EXIT
    finally:
        if node.telemetry is not None:  # flush the spans and metrics still buffered
            node.telemetry.shutdown()
    return 0


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

    pending = PendingCards()
    clock = SystemClock()
    public_url = settings.daemon.public_url or f"http://{host}:{port}"
    # The state dir is prepared (and a 0.2 layout moved in) once, before anything reads
    # the node id, the secret or the database from it.
    state = prepare_state(settings, work_dir)
    ports = cluster_ports(settings, work_dir=work_dir, database=database, clock=clock,
                          state=state)
    secret = server_secret(state)
    registered = build_surfaces(settings, deps=SurfaceDeps(
        clock=clock, pending=pending, lookup=pending.lookup, public_url=public_url,
        leadership=ports.leadership, replay=ports.replay, secret=secret, state_dir=state,
        subscriptions=pending))
    web = registered.get("web")
    if not isinstance(web, WebSurface):  # the console is the API's own surface
        raise ConfigError("the web surface is not registered (reinstall signoff)")
    node = build_node(settings, work_dir=work_dir, database=database, clock=clock,
                      autonomous_risks=autonomous_risks, surfaces=registered, state=state)
    pending.node = node
    ports.report_to(node.engine.outages)
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
                     local_no_key=not keys and is_loopback(host), web=web,
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
