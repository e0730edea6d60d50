"""/metrics gauges over HTTP: tasks by state and pending approvals, exact on every scrape,
whichever node of the shared database moved the tasks.

The node serving /metrics runs (worker, outbox, console); ``theirs`` is a second store on
the same database writing as another daemon would. Every scrape reads the counts the
database keeps (store/sql/counts.py), so another node's work shows at the next scrape.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from signoff.runtime.models import Task, TaskState
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import Change, TaskStore
from tests.api.helpers import running_node

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def gauge(text: str, name: str) -> float:
    """The value of one sample (``name`` with its labels) in a scrape."""
    prefix = f"{name} "
    return float(next(line for line in text.splitlines() if line.startswith(prefix))
                 [len(prefix):])


async def store_task(store: TaskStore, n: int, state: TaskState) -> Task:
    # A queued task pinned to a node that is not running: the test node leaves it queued.
    task = Task(id=f"t-m{n}", goal=f"goal {n}", state=state, steps=[], created_at=START,
                updated_at=START,
                claimed_by="elsewhere" if state is TaskState.QUEUED else None)
    assert await store.commit(Change(at=START, task=task, insert=True))
    return task


async def test_every_scrape_shows_every_nodes_tasks_by_state(store_url: str,
                                                              tmp_path: Path) -> None:
    """Another node's new, moved and finished tasks show at the next scrape, with the same
    metric names and labels; the pending gauge is the tasks waiting for approval."""
    theirs = make_store(store_url)
    await theirs.open()
    try:
        async with running_node(tmp_path / "work", store=make_store(store_url)) as running, \
                running.client() as client:
            empty = (await client.get("/metrics")).text
            for state in TaskState:
                assert gauge(empty, f'signoff_tasks{{state="{state.value}"}}') == 0.0
            assert gauge(empty, "signoff_pending_approvals") == 0.0

            for n in range(3):
                await store_task(theirs, n, TaskState.WAITING_APPROVAL)
            await store_task(theirs, 3, TaskState.QUEUED)
            done = await store_task(theirs, 4, TaskState.WAITING_APPROVAL)
            done.state = TaskState.COMPLETED
            assert await theirs.commit(Change(at=START, task=done))
            await store_task(theirs, 5, TaskState.FAILED)

            response = await client.get("/metrics")
            assert response.status_code == 200
            text = response.text
            assert gauge(text, 'signoff_tasks{state="waiting_approval"}') == 3.0
            assert gauge(text, "signoff_pending_approvals") == 3.0
            assert gauge(text, 'signoff_tasks{state="queued"}') == 1.0
            assert gauge(text, 'signoff_tasks{state="completed"}') == 1.0
            assert gauge(text, 'signoff_tasks{state="failed"}') == 1.0
            assert gauge(text, 'signoff_tasks{state="in_progress"}') == 0.0

            await theirs.reset()
            again = (await client.get("/metrics")).text
            assert gauge(again, 'signoff_tasks{state="waiting_approval"}') == 0.0
            assert gauge(again, "signoff_pending_approvals") == 0.0
    finally:
        await theirs.close()
