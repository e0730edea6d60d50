"""Tampering with the audit log in a real database is detected, by the API and by the CLI.

Each case edits the `audit` table directly (as someone with database access could) and
checks that `signoff.runtime.audit.verify` and `signoff audit --verify` both fail and name
the first bad event. An intact log of many pages is verified and the time printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from signoff.runtime import audit
from signoff.runtime.models import AuditEvent, RiskClass, Scope
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.sql.tables import AuditHeadRow, AuditRow
from tests.conftest import NodeFactory
from tests.factories import NoopTool, answer, noop, start

EVENTS = 10
audit_t = AuditRow.__table__  # type: ignore[attr-defined]
head_t = AuditHeadRow.__table__  # type: ignore[attr-defined]


@pytest.fixture
def db(store_url: str) -> Iterator[sa.Engine]:
    """A plain SQLAlchemy engine on the test database, for tampering."""
    engine = sa.create_engine(store_url)
    yield engine
    engine.dispose()


async def _real_log(node_factory: NodeFactory, url: str) -> list[AuditEvent]:
    """Ten events written by a real node: five requests, each answered."""
    node = await node_factory(database=url)
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    for i in range(EVENTS // 2):
        task = await start(node, [noop(f"target-{i}", tool="notify_team")])
        await answer(node, task.id, Scope.ONCE if i % 2 else Scope.DENY)
    events = await node.store.audit_chain(after=0, limit=100)
    assert len(events) == EVENTS
    return events


async def _verify(url: str, expect_head: tuple[int, str] | None = None) -> audit.Verification:
    store = make_store(url)
    await store.open()
    try:
        return await audit.verify(store, expect_head=expect_head)
    finally:
        await store.close()


def _cli(url: str, *extra: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff", "audit", "--database", url, *extra],
                          cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def _edit(db: sa.Engine, event_id: int, **changes: Any) -> None:
    with db.begin() as conn:
        data = json.loads(conn.execute(sa.select(audit_t.c.data)
                                       .where(audit_t.c.id == event_id)).scalar_one())
        data.update(changes)
        conn.execute(audit_t.update().where(audit_t.c.id == event_id)
                     .values(data=json.dumps(data)))


def _tamper(case: str, db: sa.Engine, events: list[AuditEvent]) -> None:
    with db.begin() as conn:
        if case == "edit":
            pass
        elif case == "delete middle":
            conn.execute(audit_t.delete().where(audit_t.c.id == 4))
        elif case == "delete tail":
            conn.execute(audit_t.delete().where(audit_t.c.id > EVENTS - 2))
        elif case == "swap":
            four, five = (conn.execute(sa.select(audit_t.c.data).where(audit_t.c.id == i))
                          .scalar_one() for i in (4, 5))
            conn.execute(audit_t.update().where(audit_t.c.id == 4).values(data=five))
            conn.execute(audit_t.update().where(audit_t.c.id == 5).values(data=four))
        elif case == "swap ids":
            conn.execute(audit_t.update().where(audit_t.c.id == 4).values(id=-4))
            conn.execute(audit_t.update().where(audit_t.c.id == 5).values(id=4))
            conn.execute(audit_t.update().where(audit_t.c.id == -4).values(id=5))
    if case == "edit":
        _edit(db, 4, actor="slack:UNOBODY", decision="approve")
    elif case == "invalid at":
        _edit(db, 4, at="yesterday")
    elif case == "invalid targets":
        _edit(db, 4, targets="everyone")
    elif case == "nan latency":
        _edit(db, 4, latency_ms=float("nan"))  # json.dumps writes NaN; pydantic reads it
    elif case == "infinite latency":
        _edit(db, 4, latency_ms=float("inf"))
    elif case in ("invalid json", "not an object"):
        text = '{"id": 4, "kind": "decis' if case == "invalid json" else "[4]"
        with db.begin() as conn:
            conn.execute(audit_t.update().where(audit_t.c.id == 4).values(data=text))
    elif case == "reseal edit":
        forged = audit.seal(events[3].model_copy(update={"reason": "forged"}), event_id=4,
                            prev_hash=events[2].hash)
        with db.begin() as conn:
            conn.execute(audit_t.update().where(audit_t.c.id == 4)
                         .values(data=forged.model_dump_json()))


CASES = {  # case → (first bad event, words of the problem)
    "edit": (4, "event 4 was altered"),
    # Rows that no longer hold a valid event are reported the same way, never a traceback.
    "invalid at": (4, "event 4 was altered"),
    "invalid targets": (4, "event 4 was altered"),
    # Read as a float, but not one canonical JSON can hash: reported, never a ValueError.
    "nan latency": (4, "event 4 was altered"),
    "infinite latency": (4, "event 4 was altered"),
    "invalid json": (4, "event 4 was altered"),
    "not an object": (4, "event 4 was altered"),
    # Resealed without the node's key: the chain holds, the missing signature does not.
    "reseal edit": (4, "event 4 is not signed"),
    "delete middle": (5, "event 4 is missing"),
    "swap": (4, "event 4 does not follow"),
    "swap ids": (4, "event 4 does not follow"),
    "delete tail": (EVENTS - 1, f"head record says {EVENTS}"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_tampering_makes_verify_fail_naming_the_first_bad_event(
        node_factory: NodeFactory, store_url: str, db: sa.Engine, tmp_path: Path,
        case: str) -> None:
    """Editing (even into an invalid value), deleting or reordering rows: verify() and
    `signoff audit --verify` both fail, naming the first bad event."""
    events = await _real_log(node_factory, store_url)
    assert (await _verify(store_url)).ok  # the CLI's "ok" is test_the_cli_says_ok_…'s
    _tamper(case, db, events)
    bad_event, words = CASES[case]
    result = await _verify(store_url)
    assert not result.ok
    assert result.bad_event == bad_event, result.problem
    assert words in (result.problem or "")
    broken = _cli(store_url, "--verify", cwd=tmp_path)
    assert broken.returncode == 1
    assert f"BROKEN at event {bad_event}" in broken.stderr and words in broken.stderr
    assert "Traceback" not in broken.stderr


async def test_the_cli_says_ok_for_an_intact_log(node_factory: NodeFactory, store_url: str,
                                                 tmp_path: Path) -> None:
    """`signoff audit --verify` on an untouched log: exit 0, "ok: N events"."""
    await _real_log(node_factory, store_url)
    ok = _cli(store_url, "--verify", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert f"ok: {EVENTS} events" in ok.stdout


async def test_a_cut_tail_with_a_rewritten_head_is_caught_by_expect_head(
        node_factory: NodeFactory, store_url: str, db: sa.Engine, tmp_path: Path) -> None:
    """Cutting the tail and fixing the head record passes a plain verify but not --expect-head."""
    events = await _real_log(node_factory, store_url)
    pinned = _cli(store_url, "--head", cwd=tmp_path)
    assert pinned.returncode == 0
    assert pinned.stdout.strip() == f"{EVENTS}:{events[-1].hash}"
    with db.begin() as conn:
        conn.execute(audit_t.delete().where(audit_t.c.id > 7))
        conn.execute(head_t.update().values(count=7, hash=events[6].hash))
    assert (await _verify(store_url)).ok  # a chain alone cannot see a clean cut
    result = await _verify(store_url, expect_head=(EVENTS, events[-1].hash))
    assert not result.ok and "tail was cut" in (result.problem or "")
    cli = _cli(store_url, "--verify", "--expect-head", pinned.stdout.strip(), cwd=tmp_path)
    assert cli.returncode == 1 and "tail was cut" in cli.stderr
    earlier = f"5:{events[4].hash}"  # an older pin that the cut log still contains
    assert _cli(store_url, "--verify", "--expect-head", earlier, cwd=tmp_path).returncode == 0


async def test_an_intact_log_of_many_pages_verifies(store_url: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """30,000 sealed events bulk-inserted verify, read in pages of 7,000 (four whole pages
    and a part, as 100,000 would be in the default pages of 20,000); the time is printed,
    never asserted."""
    count, page = 30_000, 7_000
    store = make_store(store_url)
    await store.open()
    began = time.perf_counter()
    rows, prev = [], audit.GENESIS
    for i in range(1, count + 1):
        event = audit.seal(AuditEvent(kind="decision", decision="approve", actor=f"slack:U{i % 7}",
                                      task_id=f"t-{i // 3}", tool="send_email",
                                      targets=["john@example.com"], risk="SEND", scope="once",
                                      fingerprint="ab" * 32, latency_ms=1.0),
                           event_id=i, prev_hash=prev)
        rows.append({"id": i, "task_id": event.task_id, "data": event.model_dump_json()})
        prev = event.hash
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            for start_at in range(0, count, 10_000):
                conn.execute(audit_t.insert(), rows[start_at:start_at + 10_000])
            conn.execute(head_t.update().where(head_t.c.id == 1).values(count=count, hash=prev))
    finally:
        engine.dispose()
    built = time.perf_counter() - began
    try:
        began = time.perf_counter()
        result = await audit.verify(store, batch=page)
        took = time.perf_counter() - began
    finally:
        await store.close()
    assert result.ok and result.count == count and result.head == prev
    with capsys.disabled():
        backend = store_url.split(":", 1)[0]
        print(f"\n[audit] {backend}: verified {count:,} events in {took:.2f} s "
              f"({count / took:,.0f} events/s); building the log took {built:.1f} s")


async def test_listing_shows_an_unreadable_row_instead_of_crashing(
        node_factory: NodeFactory, store_url: str, db: sa.Engine, tmp_path: Path) -> None:
    """`signoff audit` lists a row edited into an invalid event as `unreadable`, with why."""
    events = await _real_log(node_factory, store_url)
    _tamper("invalid at", db, events)
    listed = _cli(store_url, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["id"] for r in rows] == list(range(1, EVENTS + 1))
    assert rows[3]["kind"] == "unreadable" and "at:" in rows[3]["reason"]
    assert "yesterday" not in rows[3]["reason"]  # the stored value is not echoed
