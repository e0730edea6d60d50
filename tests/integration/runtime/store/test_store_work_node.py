"""A queued task whose ``claimed_by`` names a node (the node whose work dir its steps
used) is claimed by that node only, on every store; other queued tasks by any node."""

from __future__ import annotations

from datetime import UTC, datetime

from signoff.runtime.models import Task, TaskState
from signoff.runtime.store.port import Change, TaskStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def task(n: int, **kw: object) -> Task:
    return Task(id=f"t-{n}", goal=f"goal {n}", steps=[], created_at=NOW, updated_at=NOW, **kw)


async def test_a_task_queued_for_a_node_is_claimed_only_by_it(store: TaskStore) -> None:
    """Node B skips the older task queued for node A and takes the free one; A gets its."""
    await store.commit(Change(at=NOW, task=task(1, claimed_by="node-a", work_node="node-a"),
                              insert=True))
    await store.commit(Change(at=NOW, task=task(2), insert=True))
    by_b = await store.claim_next("node-b", NOW)
    assert by_b is not None and by_b.id == "t-2"
    assert await store.claim_next("node-b", NOW) is None  # t-1 waits for node A
    by_a = await store.claim_next("node-a", NOW)
    assert by_a is not None and by_a.id == "t-1" and by_a.state is TaskState.IN_PROGRESS
    assert by_a.claimed_by == "node-a" and by_a.work_node == "node-a"


async def test_a_requeued_task_keeps_its_node(store: TaskStore) -> None:
    """A claimed task saved back as queued for its node (a decision on another node) is
    again claimable by that node only."""
    await store.commit(Change(at=NOW, task=task(1), insert=True))
    held = await store.claim_next("node-a", NOW)
    assert held is not None
    held.work_node = "node-a"
    held.state, held.claimed_by, held.lease_until = TaskState.QUEUED, "node-a", None
    assert await store.commit(Change(at=NOW, task=held))
    assert await store.claim_next("node-b", NOW) is None
    again = await store.claim_next("node-a", NOW)
    assert again is not None and again.id == "t-1"
