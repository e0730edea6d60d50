"""The node registry on every store (memory, SQLite, PostgreSQL) and the heartbeat that
writes it: live means a beat within the node's own window, judged by the reader's clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from signoff.runtime.clock import FakeClock
from signoff.runtime.nodes import FORGET_AFTER, LIVE_BEATS, Heartbeat
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import NodeRecord, TaskStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    """Each backend in turn, opened and empty."""
    if request.param == "memory":
        s: TaskStore = MemTaskStore()
    elif request.param == "sqlite":
        s = make_store(f"sqlite:///{tmp_path / 'store.db'}")  # the SQLite file store
    else:
        s = make_store(request.getfixturevalue("pg_url"))
    await s.open()
    yield s
    await s.close()


def record(node_id: str, beat: datetime, *, window: timedelta = timedelta(seconds=15),
           running: int = 0) -> NodeRecord:
    return NodeRecord(id=node_id, host="host-1", started_at=NOW, last_beat=beat,
                      live_until=beat + window, running=running)


async def test_a_beat_lists_the_node_until_its_window_runs_out(store: TaskStore) -> None:
    """A node is listed while the reader's time is inside its window, then no more."""
    await store.beat(record("a", NOW, running=2), forget_before=NOW - FORGET_AFTER)
    [live] = await store.live_nodes(NOW + timedelta(seconds=14))
    assert live.public() == {"id": "a", "host": "host-1", "started_at": NOW.isoformat(),
                             "last_beat": NOW.isoformat(), "running": 2}
    assert await store.live_nodes(NOW + timedelta(seconds=15)) == []


async def test_a_later_beat_replaces_the_row(store: TaskStore) -> None:
    """Each beat updates the one row of its node (no duplicates), keeping started_at."""
    later = NOW + timedelta(seconds=5)
    await store.beat(record("a", NOW), forget_before=NOW - FORGET_AFTER)
    await store.beat(record("a", later, running=1), forget_before=later - FORGET_AFTER)
    await store.beat(record("b", later), forget_before=later - FORGET_AFTER)
    live = await store.live_nodes(later)
    assert [(n.id, n.last_beat, n.running, n.started_at) for n in live] == [
        ("a", later, 1, NOW), ("b", later, 0, NOW)]


async def test_leaving_removes_the_node_at_once(store: TaskStore) -> None:
    """A node that shuts down cleanly is not listed any more."""
    await store.beat(record("a", NOW), forget_before=NOW - FORGET_AFTER)
    await store.beat(record("b", NOW), forget_before=NOW - FORGET_AFTER)
    await store.leave("a")
    assert [n.id for n in await store.live_nodes(NOW)] == ["b"]


async def test_long_dead_nodes_are_forgotten_by_the_next_beat(store: TaskStore) -> None:
    """Rows of nodes dead for longer than FORGET_AFTER are deleted, recent ones kept."""
    await store.beat(record("old", NOW), forget_before=NOW - FORGET_AFTER)
    await store.beat(record("recent", NOW + FORGET_AFTER), forget_before=NOW)
    much_later = NOW + 2 * FORGET_AFTER
    await store.beat(record("new", much_later), forget_before=much_later - FORGET_AFTER)
    # Peek at every row, live or not, by reading at the earliest time.
    assert [n.id for n in await store.live_nodes(NOW - timedelta(days=30))] == ["new",
                                                                                 "recent"]


async def test_the_heartbeat_writes_clock_times_and_leaves_on_shutdown() -> None:
    """The heartbeat stamps its node's Clock (never another), counts what the worker holds,
    and removes the row when cancelled."""
    store, clock = MemTaskStore(), FakeClock(NOW)
    busy = [3]
    heartbeat = Heartbeat(store=store, clock=clock, node_id="n1", host="h", interval=
                          timedelta(seconds=2), running=lambda: busy[0])
    service = asyncio.create_task(heartbeat.run())
    for _ in range(50):
        if await store.live_nodes(NOW):
            break
        await asyncio.sleep(0.01)
    [live] = await store.live_nodes(NOW)
    assert (live.id, live.host, live.started_at, live.last_beat, live.running) == (
        "n1", "h", NOW, NOW, 3)
    assert live.live_until == NOW + LIVE_BEATS * timedelta(seconds=2)
    clock.advance(LIVE_BEATS * 2)
    assert await store.live_nodes(clock.now()) == []  # no beat since: dropped
    service.cancel()
    await asyncio.gather(service, return_exceptions=True)
    assert await store.live_nodes(NOW) == []
