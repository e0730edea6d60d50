"""LISTEN/NOTIFY wake-ups on PostgreSQL: a node wakes for another node's submissions, not
for the echo of its own (its API or scheduler already woke its worker), on both SQL
write paths (PgTaskStore's insert and the SQL store's unit of work)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import pytest

from signoff.runtime.events import audit_event
from signoff.runtime.models import Task
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import Change
from signoff.runtime.store.postgres.notify import TaskWakeups
from signoff.runtime.store.sql.store import SqlTaskStore

pytestmark = pytest.mark.postgres


class Counted:
    """A worker's `wake`, counted, with a way to wait for a count."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.changed.set()

    async def reach(self, count: int) -> None:
        async with asyncio.timeout(10):
            while self.count < count:
                self.changed.clear()
                await self.changed.wait()


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[SqlTaskStore, SqlTaskStore]]:
    """Two nodes' stores on one fresh database."""
    mine, theirs = make_store(pg_url), make_store(pg_url)
    assert isinstance(mine, SqlTaskStore) and isinstance(theirs, SqlTaskStore)
    await mine.open()
    await theirs.open()
    try:
        yield mine, theirs
    finally:
        await mine.close()
        await theirs.close()


def queued(n: int) -> Change:
    now = datetime.now(UTC)
    return Change(at=now, task=Task(id=f"t-wake-{n}", goal="g", steps=[], created_at=now,
                                    updated_at=now), insert=True)


def with_audit(n: int) -> Change:
    """An insert with an audit event: not the task alone, so the SQL store's general unit
    of work writes it (and its NOTIFY), not PgTaskStore's one-statement insert."""
    change = queued(n)
    assert change.task is not None
    change.audit = [audit_event("evaluation", change.task, None, reason="test")]
    return change


@pytest.mark.parametrize("change", [queued, with_audit], ids=["task-only", "unit-of-work"])
async def test_a_node_wakes_for_others_and_not_for_its_own_echo(
        stores: tuple[SqlTaskStore, SqlTaskStore], pg_url: str,
        change: Callable[[int], Change]) -> None:
    mine, theirs = stores
    woken = Counted()
    wakeups = TaskWakeups(url=pg_url, wake=woken, ignore=mine.wakeup_sender)
    listening = asyncio.create_task(wakeups.run())
    try:
        await woken.reach(1)  # the wake-up every (re)connect gives
        assert await mine.commit(change(1))
        assert await theirs.commit(change(2))
        # Notifications arrive in commit order on one connection: when the other node's
        # wake-up is here, the echo of ours would have come before it.
        await woken.reach(2)
        assert await mine.commit(change(3))
        assert await theirs.commit(change(4))
        await woken.reach(3)
        await asyncio.sleep(0.2)
        assert woken.count == 3
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)


async def test_without_ignore_every_submission_wakes(
        stores: tuple[SqlTaskStore, SqlTaskStore], pg_url: str) -> None:
    """A process that only submits (no worker of its own to have woken) is not ignored
    by anyone: a listener without ``ignore`` hears the node's inserts too."""
    mine, _ = stores
    woken = Counted()
    listening = asyncio.create_task(TaskWakeups(url=pg_url, wake=woken).run())
    try:
        await woken.reach(1)
        assert await mine.commit(queued(1))
        await woken.reach(2)
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
