"""Every store on its real database — the in-memory store, `SqliteTaskStore` on a SQLite
file (WAL), the plain SQLAlchemy `SqlTaskStore` on a SQLite file and on PostgreSQL — with
the same unit-of-work semantics everywhere."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from signoff.runtime import audit
from signoff.runtime.models import (
    Action,
    Approval,
    ApprovalStatus,
    AuditEvent,
    Grant,
    RiskClass,
    Scope,
    Task,
    TaskState,
)
from signoff.runtime.policy.grants import first_valid
from signoff.runtime.store.port import CardRecord, Change, OutboxItem, TaskStore
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.store.sqlite.store import SqliteTaskStore
from signoff.runtime.transcript import TranscriptEntry

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def task(n: int = 0, **kw: object) -> Task:
    return Task(id=f"t-{n}", goal=f"goal {n}", created_at=NOW, updated_at=NOW, **kw)


async def test_insert_get_and_list_newest_first_with_cursor(store: TaskStore) -> None:
    """Tasks come back whole, newest first, page by page."""
    for n in range(5):
        assert await store.commit(Change(at=NOW, task=task(n, steps=[]), insert=True))
    page = await store.list_tasks(limit=2)
    assert [t.id for t in page.items] == ["t-4", "t-3"]
    page2 = await store.list_tasks(limit=2, cursor=page.next_cursor)
    assert [t.id for t in page2.items] == ["t-2", "t-1"]
    page3 = await store.list_tasks(limit=2, cursor=page2.next_cursor)
    assert [t.id for t in page3.items] == ["t-0"] and page3.next_cursor is None
    got = await store.get_task("t-2")
    assert got is not None and got.goal == "goal 2" and got.steps == []


async def test_stale_version_loses_and_writes_nothing(store: TaskStore) -> None:
    """A compare-and-set on an old version fails and leaves no trace, audit included."""
    await store.commit(Change(at=NOW, task=task(1), insert=True))
    a = await store.get_task("t-1")
    b = await store.get_task("t-1")
    assert a is not None and b is not None
    a.goal = "first"
    assert await store.commit(Change(at=NOW, task=a, audit=[AuditEvent(kind="x")]))
    b.goal = "second"
    assert not await store.commit(Change(at=NOW, task=b, audit=[AuditEvent(kind="y")]))
    final = await store.get_task("t-1")
    assert final is not None and final.goal == "first"
    assert (await store.audit_head())[0] == 1


async def test_approval_compare_and_set_lets_one_decision_win(store: TaskStore) -> None:
    """Two decisions on one pending request: the first wins, the second loses."""
    ap = Approval(id="a-1", task_id="t-1", action=Action(tool="send_email"),
                  requested_at=NOW, expires_at=NOW + timedelta(minutes=5))
    await store.commit(Change(at=NOW, task=task(1), insert=True, approval=ap))
    one = ap.model_copy(update={"status": ApprovalStatus.APPROVED, "decided_by": "x:1"})
    two = ap.model_copy(update={"status": ApprovalStatus.DENIED, "decided_by": "x:2"})
    results = [await store.commit(Change(at=NOW, approval=one, approval_expect=ApprovalStatus.PENDING)),
               await store.commit(Change(at=NOW, approval=two, approval_expect=ApprovalStatus.PENDING))]
    assert results == [True, False]
    stored = await store.get_approval("a-1")
    assert stored is not None and stored.decided_by == "x:1"


async def test_schedule_fire_time_is_unique(store: TaskStore) -> None:
    """Two inserts for the same schedule and fire time: exactly one row."""
    fire = NOW.replace(minute=30)
    first = task(1, schedule="nightly", fire_time=fire)
    second = task(2, schedule="nightly", fire_time=fire)
    assert await store.commit(Change(at=NOW, task=first, insert=True))
    assert not await store.commit(Change(at=NOW, task=second, insert=True))
    assert len((await store.list_tasks(schedule="nightly")).items) == 1


async def test_claim_next_takes_the_oldest_queued_task_once(store: TaskStore) -> None:
    """A claim moves queued → planning (no plan) or in_progress (explicit steps)."""
    await store.commit(Change(at=NOW, task=task(1), insert=True))
    await store.commit(Change(at=NOW, task=task(2, steps=[]), insert=True))
    first = await store.claim_next("n1", NOW)
    second = await store.claim_next("n1", NOW)
    assert first is not None and first.id == "t-1" and first.state is TaskState.PLANNING
    assert second is not None and second.state is TaskState.IN_PROGRESS
    assert await store.claim_next("n1", NOW) is None


async def test_concurrent_claimers_never_take_the_same_task(store: TaskStore, tmp_path) -> None:
    """Many claimers racing over 60 tasks: every task is claimed exactly once."""
    for n in range(60):
        await store.commit(Change(at=NOW, task=task(n, steps=[]), insert=True))
    others: list[TaskStore] = [store]
    if isinstance(store, SqlTaskStore):
        for _ in range(2):
            other = type(store)(url=store.url)
            await other.open()
            others.append(other)

    async def drain(s: TaskStore, node: str) -> list[str]:
        got = []
        while (t := await s.claim_next(node, NOW)) is not None:
            got.append(t.id)
        return got

    results = await asyncio.gather(*(drain(s, f"n{i}") for i, s in enumerate(others * 2)))
    claimed = [tid for r in results for tid in r]
    assert sorted(claimed) == sorted(f"t-{n}" for n in range(60))
    for other in others[1:]:
        await other.close()


async def test_orphans_are_own_claims_or_expired_leases(store: TaskStore) -> None:
    """Recovery finds this node's old claims and anyone's expired lease, nothing else."""
    for n in range(3):
        await store.commit(Change(at=NOW, task=task(n, steps=[]), insert=True))
    await store.claim("t-0", "me", NOW + timedelta(minutes=5), TaskState.QUEUED)
    await store.claim("t-1", "other", NOW - timedelta(seconds=1), TaskState.QUEUED)
    await store.claim("t-2", "other", NOW + timedelta(minutes=5), TaskState.QUEUED)
    found = {t.id for t in await store.orphans("me", NOW)}
    assert found == {"t-0", "t-1"}
    expired_only = {t.id for t in await store.orphans(None, NOW)}
    assert expired_only == {"t-1"}, "the periodic sweep takes only expired leases"


async def test_grants_are_found_by_key_and_scope(store: TaskStore) -> None:
    """Session grants hold within their task, always grants across tasks of the policy."""
    base = dict(tool="send_email", capability="email.send", risk=RiskClass.SEND,
                fingerprint="f", created_at=NOW)
    session = Grant(id="g-1", key="k1", policy_id="t-1", task_id="t-1", scope=Scope.SESSION,
                    **base)
    always = Grant(id="g-2", key="k2", policy_id="nightly", task_id="t-9", scope=Scope.ALWAYS,
                   **base)
    once = Grant(id="g-3", key="k3", policy_id="t-1", task_id="t-1", scope=Scope.ONCE,
                 max_calls=1, used=1, **base)
    assert await store.commit(Change(at=NOW, grants=[session, always, once]))
    assert first_valid(await store.grant_candidates("k1"), task_id="t-1", now=NOW) is not None
    assert first_valid(await store.grant_candidates("k1"), task_id="t-2", now=NOW) is None
    assert first_valid(await store.grant_candidates("k2"), task_id="t-5", now=NOW) is not None
    assert first_valid(await store.grant_candidates("k3"), task_id="t-1", now=NOW) is None, "used up"
    assert await store.commit(Change(at=NOW, grant_revokes=["g-2"]))
    assert first_valid(await store.grant_candidates("k2"), task_id="t-5", now=NOW) is None
    revoked = await store.get_grant("g-2")
    assert revoked is not None and revoked.revoked_at is not None


async def test_audit_chain_verifies_across_commits(store: TaskStore) -> None:
    """Events appended in several commits form one intact chain."""
    for n in range(3):
        await store.commit(Change(at=NOW, audit=[AuditEvent(kind="decision", actor=f"x:{n}"),
                                         AuditEvent(kind="refused")]))
    result = await audit.verify(store)
    assert result.ok and result.count == 6
    assert (await store.audit_head()) == (6, result.head)
    page = await store.audit_events(limit=4)
    assert [e.id for e in page.items] == [1, 2, 3, 4] and page.next_cursor == "4"


async def test_outbox_keys_are_idempotent_and_retries_are_scheduled(store: TaskStore) -> None:
    """A second job with the same key is ignored; a retry moves the job into the future."""
    item = OutboxItem(key="post:a-1@slack", surface="slack", kind="post", payload={"x": 1},
                      next_at=NOW)
    await store.commit(Change(at=NOW, outbox=[item]))
    await store.commit(Change(at=NOW, outbox=[item]))
    due = await store.due_outbox(NOW)
    assert len(due) == 1 and due[0].payload == {"x": 1}
    await store.outbox_retry(due[0].id, next_at=NOW + timedelta(seconds=5), error="429")
    assert await store.due_outbox(NOW) == []
    assert len(await store.due_outbox(NOW + timedelta(seconds=6))) == 1
    await store.outbox_done(due[0].id, NOW)
    assert await store.due_outbox(NOW + timedelta(days=1)) == []


async def test_cards_are_remembered_once_per_surface(store: TaskStore) -> None:
    """Where a card was posted is stored once per approval and surface."""
    await store.save_card(CardRecord("a-1", "slack", "C1", "111.1"))
    await store.save_card(CardRecord("a-1", "slack", "C1", "222.2"))
    await store.save_card(CardRecord("a-1", "telegram", "42", "7"))
    cards = sorted(await store.cards("a-1"), key=lambda c: c.surface)
    assert [(c.surface, c.message_id) for c in cards] == [("slack", "111.1"), ("telegram", "7")]


async def test_reset_clears_everything_and_reports_counts(store: TaskStore) -> None:
    """`--reset` empties the store and says what it removed."""
    await store.commit(Change(at=NOW, task=task(1), insert=True, audit=[AuditEvent(kind="x")]))
    counts = await store.reset()
    assert counts["tasks"] == 1 and counts["audit events"] == 1
    assert (await store.list_tasks()).items == []
    assert (await store.audit_head())[0] == 0


async def test_unreachable_database_is_a_clear_error(tmp_path) -> None:
    """A database that cannot be reached names itself, without the password."""
    from signoff.errors import StoreError

    bad = SqlTaskStore(url="postgresql+psycopg://u:secret@127.0.0.1:1/none")
    with pytest.raises(StoreError) as info:
        await bad.open()
    assert "127.0.0.1:1" in str(info.value) and "secret" not in str(info.value)


@pytest.mark.parametrize("kind", [SqliteTaskStore, SqlTaskStore])
async def test_a_locked_sqlite_file_never_blocks_the_event_loop(tmp_path, kind: type) -> None:
    """While another process holds the write lock, writes wait in the DB thread, not the loop."""
    import sqlite3

    path = tmp_path / "locked.db"
    store = kind(url=f"sqlite:///{path}")
    await store.open()
    await store.commit(Change(at=NOW, task=task(1, steps=[]), insert=True))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, as another daemon would hold it
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    beat = asyncio.create_task(ticker())
    write = asyncio.create_task(store.commit(Change(at=NOW, task=task(2, steps=[]), insert=True)))
    await asyncio.sleep(0.3)
    assert not write.done(), "the write waits for the lock"
    assert ticks >= 10, "the event loop kept running meanwhile"
    other.execute("COMMIT")
    assert await asyncio.wait_for(write, 10)
    claimed = await store.claim_next("n", NOW)
    assert claimed is not None and claimed.id == "t-1"
    beat.cancel()
    other.close()
    await store.close()


async def test_outbox_jobs_can_be_queued_and_finished_in_one_commit(store: TaskStore) -> None:
    """A fan-out job is marked done in the same transaction that queues its copies."""
    await store.commit(Change(at=NOW, outbox=[OutboxItem(key="post:a-1", surface="*", kind="post",
                                                 payload={}, next_at=NOW)]))
    (fanout,) = await store.due_outbox(NOW)
    copy = OutboxItem(key="post:a-1@slack", surface="slack", kind="post", payload={},
                      next_at=NOW)
    assert await store.commit(Change(at=NOW, outbox=[copy], outbox_done=[fanout.id]))
    assert [i.key for i in await store.due_outbox(NOW)] == ["post:a-1@slack"]


def entry(task_id: str, seq: int, role: str = "tool", **kw: object) -> TranscriptEntry:
    return TranscriptEntry(task_id=task_id, seq=seq, role=role, content=f"m{seq}", **kw)


async def test_transcript_appends_with_the_task_and_pages_oldest_first(store: TaskStore) -> None:
    """Entries are appended with or without the task row, stamped with the change's time
    unless they carry their own, and read back in order, page by page."""
    t = task(1)
    assert await store.commit(Change(at=NOW, task=t, insert=True,
                                     transcript=[entry("t-1", 0, "system"), entry("t-1", 1)]))
    own = NOW - timedelta(seconds=5)
    assert await store.commit(Change(at=NOW + timedelta(seconds=1),
                                     transcript=[entry("t-1", 2, at=own), entry("t-1", 3)]))
    assert await store.commit(Change(at=NOW, transcript=[entry("t-2", 0)]))
    page = await store.transcript("t-1", limit=3)
    items = list(page.items)
    assert [e.seq for e in items] == [0, 1, 2] and page.next_cursor == "2"
    assert items[0].at == NOW and items[0].role == "system" and items[2].at == own
    rest = await store.transcript("t-1", after=int(page.next_cursor), limit=3)
    assert [e.seq for e in rest.items] == [3] and rest.next_cursor is None
    assert rest.items[0].at == NOW + timedelta(seconds=1)
    assert (await store.transcript("t-404")).items == []


async def test_a_second_writer_of_the_same_turn_loses_everything(store: TaskStore) -> None:
    """An entry whose (task, seq) exists makes the whole change lose: no task update, no
    audit event, no other entry."""
    await store.commit(Change(at=NOW, task=task(1), insert=True, transcript=[entry("t-1", 0)]))
    stored = await store.get_task("t-1")
    assert stored is not None
    stored.goal = "changed"
    assert not await store.commit(Change(at=NOW, task=stored, audit=[AuditEvent(kind="x")],
                                         transcript=[entry("t-1", 1), entry("t-1", 0)]))
    assert not await store.commit(Change(at=NOW, task=stored, transcript=[entry("t-1", 0)]))
    assert not await store.commit(Change(at=NOW, transcript=[entry("t-1", 1), entry("t-1", 1)]))
    again = await store.get_task("t-1")
    assert again is not None and again.goal == "goal 1"
    assert [e.seq for e in (await store.transcript("t-1")).items] == [0]
    assert (await store.audit_head())[0] == 0


async def test_reset_removes_transcripts_too(store: TaskStore) -> None:
    """`daemon start --reset` forgets conversations with their tasks."""
    await store.commit(Change(at=NOW, task=task(1), insert=True, transcript=[entry("t-1", 0)]))
    counts = await store.reset()
    assert counts["transcript entries"] == 1
    assert (await store.transcript("t-1")).items == []


async def test_the_sqlalchemy_store_works_on_sqlite_in_memory() -> None:
    """On `sqlite://` readers and writers see the same (single) in-memory database."""
    store = SqlTaskStore(url="sqlite://")
    await store.open()
    assert await store.commit(Change(at=NOW, task=task(1, steps=[]), insert=True,
                                     audit=[AuditEvent(kind="x")]))
    got = await store.get_task("t-1")
    assert got is not None and [t.id for t in (await store.list_tasks()).items] == ["t-1"]
    assert (await audit.verify(store)).count == 1
    await store.close()
