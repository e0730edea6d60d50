"""`signoff daemon start`: bind the port, assemble the node, serve, shut down cleanly.

The composition itself (the node, its surfaces, the API, the services) is
`signoff.wiring.daemon.assemble`. SIGTERM/SIGINT first stop claiming new work and give
the tasks in flight ``daemon.shutdown_grace`` (10 s) to finish, then cancel everything;
whatever was cut short is recovered on the next start (requeued, or back to a person if
a gated action was interrupted).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from pathlib import Path

from signoff.config import preflight
from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.runtime.daemon import Daemon
from signoff.runtime.models import RiskClass
from signoff.runtime.outages import OutageTooLong
from signoff.wiring.daemon import assemble
from signoff.wiring.event_loop import loop_name
from signoff.wiring.node import build_registry

log = logging.getLogger(__name__)
OUTAGE_EXIT = 3  # the database was away longer than daemon.db_outage_limit


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
             f"surfaces={','.join(node.surfaces) or 'none'} event_loop={loop_name(loop)}")
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
    # The last line of a clean stop: without it a log ending in "signoff_stopping" could
    # as well be a daemon killed while draining.
    log.info("signoff_stopped")
    return 0
