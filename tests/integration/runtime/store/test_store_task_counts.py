"""Tasks per state as the database keeps them (`store/sql/counts.py`): always what a
fresh ``GROUP BY`` over the tasks says, through every statement that moves a task, a
write that loses and rolls back, another node's writes, `reset`, and a database made by
an older signoff (counts missing: filled once at open)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from signoff.runtime.models import Action, Approval, RiskClass, Task, TaskState
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import Change, TaskStore
from signoff.runtime.store.sql import counts
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.transcript import TranscriptEntry

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LEASE = NOW + timedelta(minutes=5)


def task(n: int, **kw: object) -> Task:
    return Task(id=f"t-{n}", goal=f"goal {n}", created_at=NOW, updated_at=NOW, **kw)


async def grouped(store: TaskStore) -> dict[str, int]:
    """Tasks per state counted afresh: a GROUP BY on the database, or the memory store's
    tasks one by one."""
    if isinstance(store, SqlTaskStore):
        engine = sa.create_engine(store.url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT state, count(*) FROM tasks GROUP BY state"))
                return {state: int(n) for state, n in rows}
        finally:
            engine.dispose()
    found: dict[str, int] = {}
    page = await store.list_tasks(limit=1000)
    for t in page.items:
        found[t.state.value] = found.get(t.state.value, 0) + 1
    return found


async def assert_counts(store: TaskStore) -> None:
    expected = await grouped(store)
    assert await store.count_by_state() == expected
    live = [TaskState.QUEUED, TaskState.WAITING_APPROVAL]
    assert await store.count_by_state(live) == {s: n for s, n in expected.items()
                                               if s in live}


async def moved(store: TaskStore, t: Task, state: TaskState, **kw: object) -> bool:
    """Commit ``t`` in ``state`` (a compare-and-set on its version)."""
    t.state = state
    return await store.commit(Change(at=NOW, task=t, **kw))  # type: ignore[arg-type]


async def test_counts_follow_every_kind_of_task_write(store: TaskStore) -> None:
    """Inserts, batch and single claims, saves alone and with an approval, a lost
    compare-and-set, a change rolled back after its task was written, and reset."""
    for n in range(40):  # half planned already (claimed into in_progress), half not
        await store.commit(Change(at=NOW, task=task(n, steps=[] if n % 2 else None),
                                  insert=True))
    await store.commit(Change(at=NOW, task=task(99, state=TaskState.COMPLETED), insert=True))
    await assert_counts(store)

    claimed = await asyncio.gather(*(store.claim_next(f"n{i % 3}", LEASE) for i in range(25)))
    assert all(t is not None for t in claimed)
    one = await store.claim("t-39", "n9", LEASE, TaskState.QUEUED)
    assert one is not None and await store.claim("t-39", "n9", LEASE, TaskState.QUEUED) is None
    await assert_counts(store)

    tasks = [t for t in claimed if t is not None]
    for t in tasks[:5]:  # the task alone (each store's hot save)
        assert await moved(store, t, TaskState.FAILED)
    for t in tasks[5:10]:  # with its new approval request (the general unit of work)
        approval = Approval(id=f"a-{t.id}", task_id=t.id, requested_at=NOW,
                            expires_at=NOW + timedelta(hours=1),
                            action=Action(tool="send_email", args={}, risk=RiskClass.SEND))
        assert await moved(store, t, TaskState.WAITING_APPROVAL, approval=approval,
                           insert_approval=True)
    same = tasks[10]
    assert await moved(store, same, same.state)  # a save that changes no state
    await assert_counts(store)

    stale = tasks[11].model_copy(update={"version": tasks[11].version + 7})
    assert not await moved(store, stale, TaskState.COMPLETED)  # lost: nothing written
    turn = TranscriptEntry(task_id=tasks[12].id, seq=0, role="user", at=NOW)
    assert await store.commit(Change(at=NOW, transcript=[turn]))
    # The task is written, then its turn's message is found stored: all rolled back.
    assert not await moved(store, tasks[12], TaskState.COMPLETED,
                           transcript=[turn.model_copy()])
    await assert_counts(store)
    assert (await store.count_by_state([TaskState.FAILED])) == {"failed": 5}

    await store.reset()
    assert await store.count_by_state() == {}
    await store.commit(Change(at=NOW, task=task(1), insert=True))
    assert await store.count_by_state() == {"queued": 1}


async def test_two_nodes_writing_at_once_keep_the_counts_exact(store_url: str) -> None:
    """Two stores on one database (two nodes) insert, claim and finish tasks at the same
    time, reading the counts as they go: the counts end as a fresh GROUP BY."""
    nodes = [make_store(store_url), make_store(store_url)]
    for node in nodes:
        await node.open()
    try:
        async def work(node: TaskStore, name: str) -> None:
            for n in range(60):
                await node.commit(Change(at=NOW, task=task(n, steps=[]).model_copy(
                    update={"id": f"t-{name}-{n}"}), insert=True))
                if n % 3 == 0:
                    got = await node.claim_next(name, LEASE)
                    if got is not None and n % 2 == 0:
                        await moved(node, got, TaskState.COMPLETED)
                if n % 10 == 0:
                    await node.count_by_state()  # a scrape meanwhile (folds on PostgreSQL)

        await asyncio.gather(work(nodes[0], "a"), work(nodes[1], "b"))
        await assert_counts(nodes[0])
        assert await nodes[1].count_by_state() == await nodes[0].count_by_state()
    finally:
        for node in nodes:
            await node.close()


def _raw(url: str, *statements: str) -> None:
    """Run SQL on the database directly, as another program would."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


async def test_a_database_from_before_the_counts_is_counted_once_at_open(
        store_url: str) -> None:
    """Without the counts (an older signoff's database, its tasks moved meanwhile by SQL
    no trigger saw) the next open fills them from the tasks; writes by any program after
    that are counted too."""
    store = make_store(store_url)
    await store.open()
    for n in range(12):
        await store.commit(Change(at=NOW, task=task(n), insert=True))
    await store.close()
    postgres = not store_url.startswith("sqlite")
    on_tasks = " ON tasks" if postgres else ""
    _raw(store_url, *(f"DROP TRIGGER {name}{on_tasks}" for name in counts.TRIGGERS),
         "DROP TABLE task_counts",
         *(("DROP TABLE task_count_deltas", f"DROP FUNCTION {counts.FUNCTION}()")
           if postgres else ()),
         "UPDATE tasks SET state = 'failed' WHERE id IN ('t-1', 't-2', 't-3')",
         "DELETE FROM tasks WHERE id = 't-4'")

    store = make_store(store_url)
    await store.open()
    try:
        assert await store.count_by_state() == {"queued": 8, "failed": 3}
        _raw(store_url, "UPDATE tasks SET state = 'completed' WHERE id = 't-5'",
             "DELETE FROM tasks WHERE id = 't-1'")
        assert await store.count_by_state() == {"queued": 7, "failed": 2, "completed": 1}
        await assert_counts(store)
    finally:
        await store.close()
    store = make_store(store_url)  # opened again: installed already, nothing recounted
    await store.open()
    try:
        assert await store.count_by_state() == {"queued": 7, "failed": 2, "completed": 1}
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_writers_append_deltas_and_a_read_folds_them(pg_url: str) -> None:
    """On PostgreSQL a transition appends a delta row (no row every node updates); a read
    folds the deltas into the totals, so they never pile up where anyone counts."""
    store = make_store(pg_url)
    await store.open()
    try:
        for n in range(30):
            await store.commit(Change(at=NOW, task=task(n, steps=[]), insert=True))
        assert await store.claim_next("n1", LEASE) is not None
        engine = sa.create_engine(pg_url)
        try:
            with engine.connect() as conn:
                before = conn.execute(sa.text("SELECT count(*) FROM task_count_deltas")
                                      ).scalar_one()
                assert await store.count_by_state() == {"queued": 29, "in_progress": 1}
                after = conn.execute(sa.text("SELECT count(*) FROM task_count_deltas")
                                     ).scalar_one()
                totals = dict(conn.execute(sa.text("SELECT state, n FROM task_counts")).all())
        finally:
            engine.dispose()
        assert before > 0 and after == 0
        assert {s: n for s, n in totals.items() if n} == {"queued": 29, "in_progress": 1}
    finally:
        await store.close()
