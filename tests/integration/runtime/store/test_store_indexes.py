"""Indexes the queries rely on: created for a new database, and added at open to a
database made by an older signoff (``create_all`` skips a table that exists); and the
refusals of such a database, carried into the table made for them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from signoff.runtime.denials import refusal_key
from signoff.runtime.models import ApprovalStatus
from signoff.runtime.store.port import Change
from signoff.runtime.store.sql import groups, requests
from signoff.runtime.store.sqlite.store import SqliteTaskStore
from tests.integration.runtime.store.test_store import NOW
from tests.integration.runtime.store.test_store_requests import ACTION, request


def _plan(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "EXPLAIN QUERY PLAN SELECT seq, data FROM approvals WHERE status = 'pending' "
            "ORDER BY seq LIMIT 51").fetchall()
    return " ".join(str(r[-1]) for r in rows)


async def test_the_pending_list_reads_an_index_in_order_even_on_an_older_database(
        tmp_path: Path) -> None:
    """The oldest-first pending page needs no sort of every pending request (it was 9x
    slower at 100,000 pending); a database without the index gets it when opened."""
    path = tmp_path / "signoff.db"
    store = SqliteTaskStore(url=f"sqlite:///{path}")
    await store.open()
    await store.close()
    assert "ix_approvals_status_seq" in _plan(path)
    assert "TEMP B-TREE" not in _plan(path)
    with sqlite3.connect(path) as conn:  # as a database from before the index
        conn.execute("DROP INDEX ix_approvals_status_seq")
    assert "TEMP B-TREE" in _plan(path)
    store = SqliteTaskStore(url=f"sqlite:///{path}")
    await store.open()
    await store.close()
    assert "ix_approvals_status_seq" in _plan(path) and "TEMP B-TREE" not in _plan(path)


def _fill(path: Path, pending: int) -> None:
    """``pending`` pending requests, each the leader of a group of its own."""
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO approvals (id, task_id, status, expires_at, data) "
            "VALUES (?, '', 'pending', '2030-01-01 00:00:00', '{}')",
            [(f"ap-{n}",) for n in range(pending)])
        conn.executemany("INSERT INTO coalesced (approval_id, group_key) VALUES (?, ?)",
                         [(f"ap-{n}", f"group-{n}") for n in range(pending)])


def _steps(path: Path, read: Callable[[sa.Connection], object]) -> int:
    """SQLite virtual-machine steps that ``read`` takes on the database at ``path``: a
    count of the work done, the same on any machine at any load."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0  # go on

    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert isinstance(raw, sqlite3.Connection)
            raw.set_progress_handler(count, 1)
            assert read(conn) is None
            raw.set_progress_handler(None, 1)
    finally:
        engine.dispose()
    return steps


async def _steps_at(tmp_path: Path, sizes: tuple[int, int], fill: Callable[[Path, int], None],
                    read: Callable[[sa.Connection], object]) -> list[int]:
    """The steps ``read`` takes on a new database filled by ``fill`` to each size."""
    counts = []
    for size in sizes:
        path = tmp_path / f"{size}.db"
        store = SqliteTaskStore(url=f"sqlite:///{path}")
        await store.open()
        await store.close()
        fill(path, size)
        counts.append(_steps(path, read))
    return counts


async def test_a_new_request_does_not_read_every_pending_request_to_find_its_card(
        tmp_path: Path) -> None:
    """Each request asks whether an identical one already has a card (coalescing). That
    look read every pending request in order, so with 10,000 pending it took two thirds
    of the daemon's time and asking slowed as requests waited; it reads the group's own
    rows now, the same work at 10 pending as at 3,000."""
    few, many = await _steps_at(tmp_path, (10, 3_000), _fill,
                                lambda conn: groups.leader(conn, "group-of-a-new-request"))
    assert many <= 2 * few, f"{few} steps at 10 pending, {many} at 3,000"


def _fill_denied(path: Path, denied: int) -> None:
    """``denied`` outside requests a person denied, each under a refusal key of its own."""
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO approvals (id, task_id, status, expires_at, data) "
            "VALUES (?, '', 'denied', '2030-01-01 00:00:00', '{}')",
            [(f"ap-{n}",) for n in range(denied)])
        conn.executemany(
            "INSERT INTO requests (approval_id, policy_id, capability, reported) "
            "VALUES (?, 's-1', 'email.send', 0)", [(f"ap-{n}",) for n in range(denied)])
        conn.executemany(
            "INSERT INTO refusals (approval_id, policy_id, refusal_key, decided_at) "
            "VALUES (?, 's-1', ?, '2030-01-01 00:00:00')",
            [(f"ap-{n}", f"key-{n}") for n in range(denied)])


async def test_asking_does_not_read_every_denied_request(tmp_path: Path) -> None:
    """Each outside request asks whether a person denied this very action lately
    (remember_deny). That look read every denied request of the database, newest first,
    so asking slowed as refusals piled up; it is one probe of the refusals index now."""
    since = datetime(2029, 1, 1, tzinfo=UTC)
    few, many = await _steps_at(
        tmp_path, (10, 3_000), _fill_denied,
        lambda conn: requests.refused(conn, "s-1", "a-key-nobody-refused", since))
    assert many <= 2 * few, f"{few} steps at 10 denied, {many} at 3,000"


async def test_a_database_from_before_the_refusals_table_keeps_its_refusals(
        tmp_path: Path) -> None:
    """Opened by this signoff, a database whose denied requests predate the refusals table
    gets them in it: a deny given before the upgrade is still remembered after it."""
    path = tmp_path / "signoff.db"
    store = SqliteTaskStore(url=f"sqlite:///{path}")
    await store.open()
    ap = request(1).model_copy(update={"status": ApprovalStatus.DENIED,
                                       "decided_by": "web:bob", "decided_at": NOW})
    auto = request(2).model_copy(update={"status": ApprovalStatus.DENIED,
                                         "decided_by": "auto:policy", "decided_at": NOW})
    for made in (ap, auto):
        assert await store.commit(Change(at=NOW, approval=made, insert_approval=True))
    await store.close()
    with sqlite3.connect(path) as conn:  # as a database from before the table
        conn.execute("DROP TABLE refusals")
    store = SqliteTaskStore(url=f"sqlite:///{path}")
    await store.open()
    try:
        found = await store.refused_earlier("s-1", refusal_key(ACTION), NOW)
        assert found is not None and found.id == "a-1"
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT approval_id FROM refusals").fetchall() == [("a-1",)]
    finally:
        await store.close()
