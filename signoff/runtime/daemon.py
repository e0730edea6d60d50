"""The daemon: recover orphans, then run the worker, the expiry sweeper and every
service the wiring adds (HTTP server, chat surfaces, scheduler) in one TaskGroup.

Shutdown is cancellation: SIGTERM/SIGINT cancel the group; the work in flight is either
finished by its commit or left `in_progress` under this node's id, which the next start
requeues (or sends back to a person if a gated action was cut short).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from signoff.errors import StoreUnavailable
from signoff.runtime.decisions import Decider
from signoff.runtime.engine import Engine
from signoff.runtime.outages import (
    Backoff,
    Outages,
    OutageTooLong,
    failing,
    periodic,
    supervise,
)
from signoff.runtime.store.port import TaskStore
from signoff.runtime.worker import Worker

log = logging.getLogger(__name__)

Service = Callable[[], Awaitable[None]]


class Daemon:
    """Owns the long-running parts of one signoff node."""

    def __init__(self, *, engine: Engine, worker: Worker, decider: Decider,
                 services: Sequence[tuple[str, Service]] = (),
                 sweep_interval: float = 1.0,
                 db_outage_limit: timedelta | None = None) -> None:
        self.engine = engine
        self.worker = worker
        self.decider = decider
        self.services = list(services)
        self.sweep_interval = sweep_interval
        self.db_outage_limit = db_outage_limit  # None: wait a database outage out forever
        self.outages = engine.outages
        self.started = asyncio.Event()

    async def start(self) -> None:
        """Open the store and recover what a crash left behind (waiting for the database
        if it is away: a node started during an outage comes up when it is over)."""
        await open_patiently(self.engine.store, self.outages, self.db_outage_limit)
        backoff = Backoff(first=0.5, maximum=10.0)
        while True:
            try:
                recovered = await self.engine.recover()
                break
            except StoreUnavailable as exc:
                failing("start", exc, self.outages)
                self._check_outage()
                await asyncio.sleep(backoff.next())
        self.outages.recovered("start")
        for task in recovered:
            log.info("task_recovered", extra={"task_id": task.id, "retries": task.retries})

    async def sweep_once(self) -> None:
        """Deny requests past their expiry (and finish deciding groups of identical
        requests a crash cut short, release held approvals, requeue dead nodes' tasks)."""
        await self.decider.expire_due()
        await self.decider.settle_coalesced()  # members a crash left pending
        await self.decider.release_due()  # held approvals whose undo window is over
        await self.engine.recover(include_own=False)  # leases of dead nodes
        await self.engine.fail_stranded()  # tasks queued for a node that is gone

    async def sweep_expired(self) -> None:
        """`sweep_once` every ``sweep_interval`` seconds, waiting out failures."""
        await periodic("expiry", self.sweep_once, every=self.sweep_interval,
                       outages=self.outages)

    async def watch_outage(self) -> None:
        """End the daemon once the database has been away ``db_outage_limit``."""
        while True:
            self._check_outage()
            await asyncio.sleep(0.5)

    def _check_outage(self) -> None:
        down = self.outages.database_down_for()
        if self.db_outage_limit is not None and down is not None \
                and down >= self.db_outage_limit:
            raise OutageTooLong(f"the database has been unavailable for "
                                f"{down.total_seconds():.0f}s (daemon.db_outage_limit)")

    async def run(self) -> None:
        """Start and run until cancelled (or `OutageTooLong`)."""
        await self.start()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(supervise("worker", self.worker.run, outages=self.outages),
                                  name="worker")
                group.create_task(self.sweep_expired(), name="expiry")
                if self.db_outage_limit is not None:
                    group.create_task(self.watch_outage(), name="outage-limit")
                for name, service in self.services:
                    group.create_task(supervise(name, service, outages=self.outages),
                                      name=name)
                self.started.set()
        except* OutageTooLong as group_error:
            raise group_error.exceptions[0] from None
        finally:
            await self.engine.store.close()


async def open_patiently(store: TaskStore, outages: Outages,
                         limit: timedelta | None = None) -> None:
    """Open the store, waiting while the database is away (a node started before its
    database, as systemd may do at boot); `OutageTooLong` past ``limit``."""
    backoff = Backoff(first=0.5, maximum=10.0)
    while True:
        try:
            await store.open()
            break
        except StoreUnavailable as exc:
            failing("start", exc, outages)
            down = outages.database_down_for()
            if limit is not None and down is not None and down >= limit:
                raise OutageTooLong(f"the database has been unavailable for "
                                    f"{down.total_seconds():.0f}s (daemon.db_outage_limit)"
                                    ) from exc
            await asyncio.sleep(backoff.next())
    outages.recovered("start")
