"""The daemon: recover orphans, then run the worker, the expiry sweeper and every
service the wiring adds (HTTP server, chat platforms, scheduler) in one TaskGroup.

Shutdown is cancellation: SIGTERM/SIGINT cancel the group; the work in flight is either
finished by its commit or left `in_progress` under this node's id, which the next start
requeues (or sends back to a person if a gated action was cut short).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from signoff.runtime.decisions import Decider
from signoff.runtime.engine import Engine
from signoff.runtime.worker import Worker

log = logging.getLogger(__name__)

Service = Callable[[], Awaitable[None]]


class Daemon:
    """Owns the long-running parts of one signoff node."""

    def __init__(self, *, engine: Engine, worker: Worker, decider: Decider,
                 services: Sequence[tuple[str, Service]] = (),
                 sweep_interval: float = 1.0) -> None:
        self.engine = engine
        self.worker = worker
        self.decider = decider
        self.services = list(services)
        self.sweep_interval = sweep_interval
        self.started = asyncio.Event()

    async def start(self) -> None:
        """Open the store and recover what a crash left behind."""
        await self.engine.store.open()
        recovered = await self.engine.recover()
        for task in recovered:
            log.info("task_recovered", extra={"task_id": task.id, "retries": task.retries})

    async def sweep_expired(self) -> None:
        """Deny requests past their expiry, every ``sweep_interval`` seconds."""
        while True:
            try:
                await self.decider.expire_due()
                await self.decider.release_due()  # held approvals whose undo window is over
                await self.engine.recover(include_own=False)  # leases of dead nodes
            except Exception:
                log.exception("sweep_failed")
            await asyncio.sleep(self.sweep_interval)

    async def run(self) -> None:
        """Start and run until cancelled."""
        await self.start()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.worker.run(), name="worker")
                group.create_task(self.sweep_expired(), name="expiry")
                for name, service in self.services:
                    group.create_task(_guard(name, service), name=name)
                self.started.set()
        finally:
            await self.engine.store.close()


async def _guard(name: str, service: Service) -> None:
    """Run a service; a crash is logged and does not take the daemon down."""
    try:
        await service()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("service_failed", extra={"service": name})
