"""The worker: claims queued tasks atomically and advances them, a few at a time.

Tasks come from two places: the store's queue (`claim_next`, safe with any number of
workers on one database) and tasks this node already holds, such as one approved a
moment ago (`hand_over`). While a task runs, its lease is renewed so that other nodes
do not take it for an orphan.

A task handed over waits in this node's ready queue (a one-shot run, which runs no
consumers, takes its own task out of it: `take_ready`), in memory, while the database says
this node holds it. The node may be frozen (SIGSTOP, a suspended VM) or cut off past its
lease meanwhile, and another node recover the task: so each is re-read before it is
acted on, and dropped (``task_dropped``) unless this node still holds it unchanged. A
thawed node thus acts on nothing it only thought it owned; what it is running already
is fenced by the engine (a lease compare-and-set before each effect, the task's version
on each write).

Before claiming from the queue, a consumer passes the ``gate`` it was given (the wiring
gives the outbox's `room`): work waiting for nobody yields to the approval cards that
people are waiting for. Tasks handed over (just approved) never wait at the gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from signoff.runtime.engine import Engine
from signoff.runtime.models import Task
from signoff.runtime.outages import Backoff, Finished, failing, periodic

log = logging.getLogger(__name__)


class Worker:
    """Runs tasks with ``concurrency`` parallel consumers."""

    def __init__(self, *, engine: Engine, concurrency: int = 4,
                 poll_interval: float = 0.5,
                 gate: Callable[[], Awaitable[None]] | None = None) -> None:
        self.engine = engine
        self.gate = gate
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self._ready: asyncio.Queue[Task] = asyncio.Queue()
        self._wake = asyncio.Event()
        self._paused = False
        self.busy = 0
        self._backoff = Backoff(first=poll_interval / 2 or 0.05, maximum=5.0)

    def pause(self) -> None:
        """Stop claiming queued tasks (shutdown); tasks handed over still run."""
        self._paused = True

    def wake(self) -> None:
        """Look at the queue now (a task was submitted)."""
        self._wake.set()

    async def hand_over(self, task: Task) -> None:
        """Run a task this node already claimed (e.g. just approved)."""
        await self._ready.put(task)
        self._wake.set()

    def take_ready(self, task_id: str) -> Task | None:
        """Task ``task_id`` taken out of the ready queue, not run, if it was handed over.

        A one-shot run (`signoff handle`, the embedded Agent) runs no consumers: it waits
        for its own task and advances it itself when a decision hands it over here.
        """
        found: Task | None = None
        others: list[Task] = []
        while not self._ready.empty():
            task = self._ready.get_nowait()
            if found is None and task.id == task_id:
                found = task
            else:
                others.append(task)
        for task in others:  # left in their order
            self._ready.put_nowait(task)
        return found

    async def run(self) -> None:
        """Consume until cancelled."""
        async with asyncio.TaskGroup() as group:
            for n in range(self.concurrency):
                group.create_task(self._consume(), name=f"signoff-worker-{n}")

    async def _next(self) -> Task | None:
        if (ready := await self._next_ready()) is not None:
            return ready
        if self._paused:
            return None
        if self.gate is not None:
            await self.gate()
            # An approval came in meanwhile: it goes first.
            if (ready := await self._next_ready()) is not None:
                return ready
        cfg = self.engine.config
        return await self.engine.store.claim_next(cfg.node_id,
                                                  self.engine.clock.now() + cfg.lease)

    async def _next_ready(self) -> Task | None:
        """The next task of the ready queue this node still holds (see `_still_held`)."""
        while not self._ready.empty():
            task = self._ready.get_nowait()
            try:
                held = await self._still_held(task)
            except BaseException:  # the database is away: keep it for the next try
                self._ready.put_nowait(task)
                raise
            if held is not None:
                return held
        return None

    async def _still_held(self, task: Task) -> Task | None:
        """``task`` (handed over) when the database says this node still holds it as it
        was handed over; None, and it is dropped, when another node took it meanwhile."""
        stored = await self.engine.store.get_task(task.id)
        if stored is not None and stored.claimed_by == self.engine.config.node_id \
                and stored.version == task.version:
            return task
        log.warning("task_dropped", extra={
            "task_id": task.id, "reason": "no longer held by this node",
            "claimed_by": stored.claimed_by if stored else None})
        return None

    async def _consume(self) -> None:
        while True:
            # Cleared before looking, not after: a wake-up (a submission, a NOTIFY) that
            # comes while this consumer looks at the queue must not be lost until the next
            # poll. Whoever clears it looks at the queue afterwards, so none is missed.
            self._wake.clear()
            try:
                task = await self._next()
            except Exception as exc:  # the database is away: wait it out, never exit
                failing("worker", exc, self.engine.outages)
                await asyncio.sleep(self._backoff.next())
                continue
            if self.engine.outages.recovered("worker"):
                self._backoff.reset()
            if task is None:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                # lands in the same tick as the event, and shutdown would hang.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_interval):
                        await self._wake.wait()
                continue
            self.busy += 1
            try:
                await self._advance(task)
            except Exception:  # one bad task must not stop the worker
                log.exception("task_crashed", extra={"task_id": task.id})
            finally:
                self.busy -= 1

    async def _advance(self, task: Task) -> None:
        """Advance ``task`` with its lease renewed while it runs (`_keep_lease`). The
        keeper starts only once the task has run for a renewal interval: most tasks end
        long before, and a task (and a task group) per task cost the worker more than
        a task's own steps. A timer is what every task pays."""
        loop = asyncio.get_running_loop()
        keeper: asyncio.Task[None] | None = None

        def keep() -> None:
            nonlocal keeper
            keeper = loop.create_task(self._keep_lease(task), name=f"lease-{task.id}")

        timer = loop.call_later(self._renew_every(), keep)
        try:
            await self.engine.advance(task)
        finally:
            timer.cancel()
            if keeper is not None:
                keeper.cancel()
                await asyncio.wait([keeper])  # gone before the next task; never raises

    def _renew_every(self) -> float:
        """Seconds between two renewals of a running task's lease: a third of it."""
        return max(self.engine.config.lease.total_seconds() / 3, 0.05)

    async def _keep_lease(self, task: Task) -> None:
        """Renew the task's lease now, then every third of it while it runs. A failed
        renewal (the database away) is not fatal to the task: it is tried again, within
        an interval; if the outage outlasts the lease, the task's own next write fails
        its compare-and-set and the task is recovered as after a crash."""
        cfg = self.engine.config
        every = self._renew_every()

        async def renew() -> None:
            until = self.engine.clock.now() + cfg.lease
            if not await self.engine.store.renew_lease(task.id, cfg.node_id, until):
                # Recovered by another node (this one was frozen or cut off): the
                # task's next write or effect fence fails and it is re-read.
                log.warning("lease_lost", extra={"task_id": task.id})
                raise Finished
            task.lease_until = until  # a save of the task must not shorten it again

        await periodic("lease", renew, every=every, outages=self.engine.outages,
                       backoff=Backoff(first=min(0.2, every), maximum=every))

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait until no task is being worked on (for tests and the one-shot CLI)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while (self.busy or not self._ready.empty()) and loop.time() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # polling is fine here: shutdown and tests only
