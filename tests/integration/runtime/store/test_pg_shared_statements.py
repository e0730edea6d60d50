"""PgTaskStore on the machine's PostgreSQL: concurrent inserts and saves share statements
(group commit), each keeps its own outcome, and a burst of submissions is announced by
few wake-ups, the last insert always among the announced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from signoff.runtime.models import Task, TaskState
from signoff.runtime.store.port import Change
from signoff.runtime.store.postgres.notify import TaskWakeups
from signoff.runtime.store.postgres.store import PgTaskStore

pytestmark = pytest.mark.postgres
NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def task(n: int, **kw: object) -> Task:
    return Task(id=f"t-shared-{n}", goal=f"goal {n}", steps=[], created_at=NOW,
                updated_at=NOW, **kw)


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PgTaskStore]:
    s = PgTaskStore(url=pg_url)
    await s.open()
    yield s
    await s.close()


def checkouts(store: PgTaskStore) -> int:
    """Connections the hot path's pool has handed out: one per statement it ran."""
    return int(store._apool.get_stats().get("requests_num", 0))


async def test_concurrent_inserts_share_statements_and_a_duplicate_loses_alone(
        store: PgTaskStore) -> None:
    """30 submissions at once, two of them the same schedule fire: everything but the
    duplicate is stored, in far fewer statements than submissions."""
    fire = datetime(2026, 3, 1, 9, 5, tzinfo=UTC)
    tasks = [task(n) for n in range(28)]
    tasks += [task(100, schedule="nightly", fire_time=fire),
              task(101, schedule="nightly", fire_time=fire)]
    before = checkouts(store)
    results = await asyncio.gather(*(store.commit(Change(at=NOW, task=t, insert=True))
                                     for t in tasks))
    statements = checkouts(store) - before
    assert results[:28] == [True] * 28
    assert sorted(results[28:]) == [False, True]  # one fire time, one task
    for t in tasks[:28]:
        stored = await store.get_task(t.id)
        assert stored is not None and stored.goal == t.goal
    assert statements < 20, statements  # 30 alone would be 30 (+ wake-ups)


async def test_concurrent_saves_share_statements_and_a_stale_one_loses_alone(
        store: PgTaskStore) -> None:
    """20 tasks saved at once plus a second save of one of them from the same version:
    the 20 are written, the stale twin is refused, in fewer statements than saves."""
    for n in range(20):
        assert await store.commit(Change(at=NOW, task=task(n), insert=True))
    loaded = [await store.get_task(f"t-shared-{n}") for n in range(20)]
    assert all(t is not None for t in loaded)
    mine = [t for t in loaded if t is not None]
    for t in mine:
        t.state = TaskState.COMPLETED
    twin = mine[7].model_copy(deep=True)
    twin.state = TaskState.FAILED
    before = checkouts(store)
    results = await asyncio.gather(*(store.commit(Change(at=NOW, task=t))
                                     for t in [*mine, twin]))
    statements = checkouts(store) - before
    assert sorted([results[7], results[20]]) == [False, True]  # the same version, once
    assert results[:7] + results[8:20] == [True] * 19
    for n in range(20):
        stored = await store.get_task(f"t-shared-{n}")
        assert stored is not None and stored.version == 1
        if n != 7:
            assert stored.state is TaskState.COMPLETED
    stored7 = await store.get_task("t-shared-7")
    assert stored7 is not None
    assert stored7.state is (TaskState.COMPLETED if results[7] else TaskState.FAILED)
    assert statements < 15, statements


async def test_a_burst_of_submissions_is_announced_by_few_wake_ups(pg_url: str) -> None:
    """Wake-ups of one node are at least its gap apart: a burst gets one at once and one
    after the gap for the rest (never one per insert), so the last insert is announced."""
    gap = 1.0
    store = PgTaskStore(url=pg_url, notify_gap=gap)
    await store.open()
    heard: list[float] = []
    wakeups = TaskWakeups(url=pg_url, wake=lambda: heard.append(time.monotonic()))
    listening = asyncio.create_task(wakeups.run())
    try:
        async with asyncio.timeout(10):
            while not heard:  # the wake-up every (re)connect gives
                await asyncio.sleep(0.01)
        heard.clear()
        began = time.monotonic()
        for n in range(40):
            assert await store.commit(Change(at=NOW, task=task(n), insert=True))
        took = time.monotonic() - began
        async with asyncio.timeout(10 + gap):
            while not heard or heard[-1] < began + took:  # the last insert's, after it
                await asyncio.sleep(0.01)
        # Once at once, then at most one per gap the inserts lasted, and the trailing one.
        assert len(heard) <= 2 + int(took / gap), (len(heard), took)
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        await store.close()
