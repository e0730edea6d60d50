"""Indexes the queries rely on: created for a new database, and added at open to a
database made by an older signoff (``create_all`` skips a table that exists)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from signoff.runtime.store.sqlite.store import SqliteTaskStore


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
