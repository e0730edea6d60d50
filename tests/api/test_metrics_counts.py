"""/metrics gauges: what a scrape shows of work in flight, of finished tasks, of other nodes.

A scrape counts the live states every time and the finished ones (which only grow) at
most once per ``finished_every`` of the node's Clock; in between this node's own
finished tasks are added as its engine reports them. Here two "nodes" share one
database: ``ours`` is scraped, ``theirs`` writes through the store as another daemon would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from signoff.api.metrics import MetricsListener
from signoff.runtime.clock import FakeClock
from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Task, TaskState
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import Change, TaskStore

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def gauge(text: str, state: str) -> float:
    """The value of ``signoff_tasks{state=…}`` in a scrape."""
    prefix = f'signoff_tasks{{state="{state}"}} '
    return float(next(line for line in text.splitlines() if line.startswith(prefix))
                 [len(prefix):])


async def store_task(store: TaskStore, n: int, state: TaskState) -> Task:
    task = Task(id=f"t-m{n}", goal=f"goal {n}", state=state, steps=[], created_at=START,
                updated_at=START)
    assert await store.commit(Change(at=START, task=task, insert=True))
    return task


async def test_finished_counts_are_kept_between_refreshes(store_url: str) -> None:
    """Queued tasks show at once; another node's completions show after finished_every;
    this node's own completions show at once, and are not counted twice at the refresh."""
    store = make_store(store_url)
    await store.open()
    try:
        clock = FakeClock(START)
        ours = MetricsListener(finished_every=timedelta(seconds=30))
        await store_task(store, 1, TaskState.COMPLETED)
        first = (await ours.render(store, clock.now())).decode()
        assert gauge(first, "completed") == 1.0

        await store_task(store, 2, TaskState.QUEUED)  # work in flight: counted every time
        await store_task(store, 3, TaskState.COMPLETED)  # another node's: not yet
        mine = await store_task(store, 4, TaskState.COMPLETED)
        await ours.task_event(TaskEvent.COMPLETED, mine)  # this node's engine said so
        clock.advance(10)
        second = (await ours.render(store, clock.now())).decode()
        assert gauge(second, "queued") == 1.0
        assert gauge(second, "completed") == 2.0  # the count of the first scrape + mine

        clock.advance(30)
        third = (await ours.render(store, clock.now())).decode()
        assert gauge(third, "completed") == 3.0  # counted again: theirs and mine, once each
        assert gauge(third, "failed") == 0.0
    finally:
        await store.close()
