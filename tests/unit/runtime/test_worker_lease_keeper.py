"""The worker renews the lease of a task while it runs: a task that runs longer than its
lease is still this node's (no other node recovers it), and a quick one ends untouched."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from signoff.runtime.models import TaskState
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.worker import Worker
from tests.conftest import NodeFactory
from tests.factories import NoopTool, noop

LEASE = timedelta(milliseconds=300)  # renewed every 100 ms


class _Renewals(MemTaskStore):
    """Remembers each lease renewal and whether the task was still running then."""

    def __init__(self) -> None:
        super().__init__()
        self.renewed: list[tuple[str, TaskState]] = []

    async def renew_lease(self, task_id: str, node_id: str, until: datetime) -> bool:
        stored = await self.get_task(task_id)
        self.renewed.append((task_id, stored.state if stored else TaskState.FAILED))
        return await super().renew_lease(task_id, node_id, until)


async def test_a_task_running_past_its_lease_keeps_it(node_factory: NodeFactory) -> None:
    """A step that takes 1.5 leases: the lease is renewed while it runs, the task
    completes on this node, and no other node could have taken it meanwhile."""
    store = _Renewals()
    node = await node_factory({"daemon": {"lease": LEASE}}, store=store)
    slow = NoopTool(delay=LEASE.total_seconds() * 1.5)
    node.registry.register(slow)
    worker = Worker(engine=node.engine, concurrency=1, poll_interval=0.01)
    task = await node.engine.submit("slow", steps=[noop()])
    assert task is not None
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(500):
            stored = await store.get_task(task.id)
            if stored is not None and stored.state is TaskState.COMPLETED:
                break
            await asyncio.sleep(0.01)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert stored is not None and stored.state is TaskState.COMPLETED
    assert slow.runs == 1
    assert (task.id, TaskState.IN_PROGRESS) in store.renewed
