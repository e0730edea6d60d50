"""The worker's wake-up: a submission that lands while a consumer is looking at the queue
is not lost until the next poll."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from signoff.runtime.models import Task, TaskState
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.worker import Worker
from tests.conftest import NodeFactory
from tests.factories import listdir


class _SubmitDuringLook(MemTaskStore):
    """The first look at the queue finds it empty, and a submission (with its wake-up)
    arrives before that look returns — what a NOTIFY during a claim query looks like."""

    def __init__(self) -> None:
        super().__init__()
        self.during_first_look: Any = None

    async def claim_next(self, node_id: str, lease_until: datetime) -> Task | None:
        found = await super().claim_next(node_id, lease_until)
        arrive, self.during_first_look = self.during_first_look, None
        if arrive is not None:
            await arrive()
        return found


async def test_a_wake_during_an_empty_claim_is_not_lost(node_factory: NodeFactory) -> None:
    """With a poll interval far longer than the test, a task submitted (and woken for)
    while the only consumer was finding the queue empty still runs."""
    store = _SubmitDuringLook()
    node = await node_factory(store=store)
    worker = Worker(engine=node.engine, concurrency=1, poll_interval=3600)
    submitted: list[Task] = []

    async def arrive() -> None:
        task = await node.engine.submit("late", steps=[listdir()])
        assert task is not None
        submitted.append(task)
        worker.wake()

    store.during_first_look = arrive
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(500):
            stored = await store.get_task(submitted[0].id) if submitted else None
            if stored is not None and stored.state is TaskState.COMPLETED:
                break
            await asyncio.sleep(0.01)
        assert stored is not None and stored.state is TaskState.COMPLETED
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
