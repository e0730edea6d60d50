"""`SqliteTaskStore` on a real SQLite file: every sqlite3 call on its one thread, never on
the event loop, and concurrent units of work group-committed, each still all-or-nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from signoff.errors import StoreError
from signoff.runtime import audit
from signoff.runtime.models import (
    Action,
    Approval,
    AuditEvent,
    RiskClass,
    Scope,
    Task,
    TaskState,
)
from signoff.runtime.store.port import Change
from signoff.runtime.store.sqlite.store import SqliteTaskStore
from signoff.runtime.store.sqlite.thread import Kind, StoreThread
from tests.conftest import NodeFactory
from tests.factories import NoopTool, answer, noop, start

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

class SqliteCalls:
    """The thread of every sqlite3 connect and method call, while ``calls`` is not None.

    sqlite3 announces each connection through an audit hook; the profiler sees every call
    of a method of a connection or cursor (execute, commit, fetchone, close, …).
    """

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] | None = None
        self.hooked = False

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.calls is not None and event == "sqlite3.connect":
            self.calls.append((threading.get_ident(), "connect"))

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if self.calls is not None and event == "c_call":
            owner = getattr(arg, "__self__", None)
            if isinstance(owner, sqlite3.Connection | sqlite3.Cursor):
                self.calls.append((threading.get_ident(),
                                   f"{type(owner).__name__}.{arg.__name__}"))


RECORDER = SqliteCalls()


@pytest.fixture
def sqlite_calls() -> Iterator[list[tuple[int, str]]]:
    """Record the thread of every sqlite3 connect and method call made during the test."""
    if not RECORDER.hooked:  # audit hooks cannot be removed: one, switched by `calls`
        sys.addaudithook(RECORDER.audit)
        RECORDER.hooked = True
    RECORDER.calls = calls = []
    threading.setprofile(RECORDER.profile)  # threads started from now on (the store's)
    sys.setprofile(RECORDER.profile)  # this thread: the event loop's
    try:
        yield calls
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        RECORDER.calls = None


def task(n: int) -> Task:
    return Task(id=f"t-{n}", goal=f"goal {n}", steps=[], created_at=NOW, updated_at=NOW)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    """An opened SqliteTaskStore on a fresh file."""
    s = SqliteTaskStore(url=f"sqlite:///{tmp_path / 'store.db'}")
    await s.open()
    yield s
    await s.close()


async def test_no_sqlite_call_ever_runs_on_the_event_loop(
        node_factory: NodeFactory, sqlite_calls: list[tuple[int, str]]) -> None:
    """A whole approval flow on SQLite makes every sqlite3 call on one thread, not the loop's."""
    node = await node_factory()
    assert isinstance(node.store, SqliteTaskStore)
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    node.registry.register(NoopTool())
    waiting = await start(node, [noop("ops", tool="notify_team"), noop()])
    assert waiting.state is TaskState.WAITING_APPROVAL
    await answer(node, waiting.id, Scope.SESSION)
    done = await node.store.get_task(waiting.id)
    assert done is not None and done.state is TaskState.COMPLETED
    for _ in range(3):
        await node.engine.submit("queued", steps=[noop()])
    assert await node.store.claim_next("n", NOW) is not None
    assert (await audit.verify(node.store)).ok
    await node.store.list_tasks(limit=2)
    await node.store.reset()
    await node.store.close()
    loop_thread = threading.get_ident()
    assert sqlite_calls, "the store made sqlite3 calls that were recorded"
    assert [s for t, s in sqlite_calls if t == loop_thread] == []
    assert len({t for t, _ in sqlite_calls}) == 1, "one thread owns the connection"
    assert sqlite_calls[0][1] == "connect"
    assert {"Connection.execute", "Connection.close"} <= {s for _, s in sqlite_calls}


async def test_concurrent_units_commit_together_and_a_lost_one_alone(
        store: SqliteTaskStore) -> None:
    """Units submitted at once share one commit; each that loses its race writes nothing."""
    for n in range(1, 5):
        assert await store.commit(Change(at=NOW, task=task(n), insert=True))
    one, three, four = [await store.get_task(f"t-{n}") for n in (1, 3, 4)]
    stale, fresh = await store.get_task("t-2"), await store.get_task("t-2")
    assert one and three and four and stale and fresh
    fresh.goal = "changed elsewhere"
    assert await store.commit(Change(at=NOW, task=fresh))
    one.goal, stale.goal, three.goal, four.goal = "one", "stale", "three", "four"
    approval = Approval(id="a-4", task_id="t-4", action=Action(tool="noop"),
                        requested_at=NOW, expires_at=NOW + timedelta(minutes=5))
    before = store.commits
    results = await asyncio.gather(
        store.commit(Change(at=NOW, task=one, audit=[AuditEvent(kind="x", task_id="t-1")])),
        store.commit(Change(at=NOW, task=stale)),  # version already moved on
        store.commit(Change(at=NOW, task=task(1), insert=True)),  # duplicate id
        # writes the approval and the task, then finds no grant to revoke: all undone
        store.commit(Change(at=NOW, task=four, approval=approval, grant_revokes=["g-none"],
                            audit=[AuditEvent(kind="y", task_id="t-4")])),
        store.commit(Change(at=NOW, task=three, audit=[AuditEvent(kind="z", task_id="t-3")])),
    )
    assert results == [True, False, False, False, True]
    assert store.commits == before + 1, "the five units shared one transaction"
    goals = [(t.goal, t.version) for n in range(1, 5) if (t := await store.get_task(f"t-{n}"))]
    assert goals == [("one", 1), ("changed elsewhere", 1), ("three", 1), ("goal 4", 0)]
    assert await store.get_approval("a-4") is None
    chain = await audit.verify(store)
    assert chain.ok and chain.count == 2
    assert [e.kind for e in await store.audit_chain()] == ["x", "z"]


async def test_units_apart_in_time_commit_apart(store: SqliteTaskStore) -> None:
    """A unit awaited before the next is submitted is durable on its own (no waiting batch)."""
    before = store.commits
    assert await store.commit(Change(at=NOW, task=task(1), insert=True))
    assert store.commits == before + 1
    assert await store.commit(Change(at=NOW, task=task(2), insert=True))
    assert store.commits == before + 2


async def test_a_failing_unit_does_not_stop_the_thread(store: SqliteTaskStore) -> None:
    """A unit that raises (bad data) fails alone with its error; the store keeps working."""
    naive = task(1).model_copy(update={"lease_until": datetime(2026, 1, 1)})
    results = await asyncio.gather(
        store.commit(Change(at=NOW, task=task(2), insert=True,
                            audit=[AuditEvent(kind="x")])),
        store.commit(Change(at=NOW, task=naive, insert=True, audit=[AuditEvent(kind="y")])),
        return_exceptions=True)
    assert results[0] is True and isinstance(results[1], Exception)
    assert await store.get_task("t-1") is None and await store.get_task("t-2") is not None
    assert (await audit.verify(store)).count == 1


async def test_an_unopenable_sqlite_file_is_a_clear_error(tmp_path: Path) -> None:
    """A SQLite file that cannot be opened names itself."""
    missing = tmp_path / "no-such-dir" / "x.db"
    bad = SqliteTaskStore(url=f"sqlite:///{missing}")
    with pytest.raises(StoreError) as info:
        await bad.open()
    assert "cannot open database" in str(info.value) and str(missing) in str(info.value)
    await bad.close()



async def test_a_transaction_that_sqlite_ends_itself_keeps_nothing(tmp_path: Path) -> None:
    """If SQLite aborts a group's transaction (I/O error), every unit in it fails, none half-kept."""
    thread = StoreThread(connect=lambda: sqlite3.connect(tmp_path / "t.db", isolation_level=None),
                         close=lambda: None, label="t.db")
    await thread.submit(Kind.ALONE, lambda: thread.conn.execute("CREATE TABLE t (n INT)"))

    def insert(n: int) -> int:
        thread.conn.execute("INSERT INTO t VALUES (?)", (n,))
        return n

    def aborted() -> None:
        thread.conn.execute("ROLLBACK")  # what SQLite does itself on SQLITE_FULL or IOERR
        raise sqlite3.OperationalError("disk I/O error")

    results = await asyncio.gather(thread.submit(Kind.UNIT, lambda: insert(1)),
                                   thread.submit(Kind.UNIT, aborted),
                                   thread.submit(Kind.UNIT, lambda: insert(3)),
                                   return_exceptions=True)
    assert all(isinstance(r, StoreError) for r in results), results
    rows = await thread.submit(Kind.READ, lambda: thread.conn.execute(
        "SELECT n FROM t").fetchall())
    assert rows == []
    assert await thread.submit(Kind.UNIT, lambda: insert(4)) == 4, "the thread goes on"
    await thread.stop()


async def test_a_cancelled_caller_does_not_disturb_the_others(store: SqliteTaskStore) -> None:
    """A caller that gives up while its call is queued leaves the other callers' results intact."""
    gone = asyncio.ensure_future(store.commit(Change(at=NOW, task=task(1), insert=True)))
    kept = asyncio.ensure_future(store.commit(Change(at=NOW, task=task(2), insert=True)))
    await asyncio.sleep(0)  # both submitted
    gone.cancel()
    assert await kept is True
    assert await store.get_task("t-2") is not None
    assert [t.id for t in (await store.list_tasks()).items] in (["t-2"], ["t-2", "t-1"])
