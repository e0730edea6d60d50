"""`SqliteTaskStore`'s grant cache: answers on the loop while no grant changed, and never
returns a grant that a store's write — its own, another store's, another process's — has
revoked, nor misses one such a write has added."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from signoff.errors import StoreError
from signoff.runtime.models import Grant, RiskClass, Scope
from signoff.runtime.policy.grants import first_valid
from signoff.runtime.store.port import Change
from signoff.runtime.store.sqlite.grants import GrantCache
from signoff.runtime.store.sqlite.store import SqliteTaskStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def grant(n: int, key: str = "k", **extra: object) -> Grant:
    return Grant(id=f"g-{n}", key=key, policy_id="p", task_id="t-1", scope=Scope.ALWAYS,
                 tool="send_email", capability="email.send", risk=RiskClass.SEND,
                 fingerprint=f"f{n}", created_at=NOW, **extra)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SqliteTaskStore]:
    """An opened SqliteTaskStore on a fresh file."""
    s = SqliteTaskStore(url=f"sqlite:///{db}")
    await s.open()
    yield s
    await s.close()


async def ids(store: SqliteTaskStore, key: str = "k") -> list[str]:
    return [g.id for g in await store.grant_candidates(key)]


async def test_a_repeated_lookup_is_answered_without_the_thread(store: SqliteTaskStore) -> None:
    """Once read, the grants of a key (or their absence) come from the cache."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    assert await ids(store) == ["g-1"] and await ids(store, "none") == []
    hits = store.grant_cache.hits
    assert await ids(store) == ["g-1"] and await ids(store, "none") == []
    assert store.grant_cache.hits == hits + 2


async def test_own_revoke_and_insert_are_seen_at_once(store: SqliteTaskStore) -> None:
    """A revocation or a new grant committed by this store shows in the next lookup."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    assert await ids(store) == ["g-1"]
    assert await store.commit(Change(at=NOW, grants=[grant(2)]))
    assert await ids(store) == ["g-1", "g-2"]
    assert await store.commit(Change(at=NOW, grant_revokes=["g-1"]))
    assert await ids(store) == ["g-2"]
    await store.reset()
    assert await ids(store) == []


async def test_another_store_on_the_file_revokes_and_adds(store: SqliteTaskStore,
                                                          db: Path) -> None:
    """A second store (its own connection) revokes and adds; the first sees both next."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    assert await ids(store) == ["g-1"] and await ids(store) == ["g-1"]
    other = SqliteTaskStore(url=f"sqlite:///{db}")
    await other.open()
    try:
        assert await other.commit(Change(at=NOW, grant_revokes=["g-1"], grants=[grant(2)]))
    finally:
        await other.close()
    assert await ids(store) == ["g-2"]


REVOKE_IN_ANOTHER_PROCESS = """
import asyncio, sys
from datetime import UTC, datetime
from signoff.runtime.store.port import Change
from signoff.runtime.store.sqlite.grants import GrantCache
from signoff.runtime.store.sqlite.store import SqliteTaskStore

async def main() -> None:
    store = SqliteTaskStore(url=f"sqlite:///{sys.argv[1]}")
    await store.open()
    assert await store.commit(Change(at=datetime.now(UTC), grant_revokes=["g-1"]))
    await store.close()

asyncio.run(main())
"""


async def test_a_revoke_by_another_process_is_seen_at_once(store: SqliteTaskStore,
                                                           db: Path) -> None:
    """A `signoff handle` or second daemon on the file revokes: the next lookup here,
    with no other call in between, no longer returns the grant."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    assert await ids(store) == ["g-1"] and await ids(store) == ["g-1"]
    subprocess.run([sys.executable, "-c", REVOKE_IN_ANOTHER_PROCESS, str(db)], check=True,
                   timeout=60)
    assert await ids(store) == []


async def test_a_write_outside_any_store_is_seen_after_the_next_call(
        store: SqliteTaskStore, db: Path) -> None:
    """A raw sqlite3 write (the shell) shows once the store's thread has run again."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    assert await ids(store) == ["g-1"] and await ids(store) == ["g-1"]
    row = grant(3)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("UPDATE grants SET revoked = 1 WHERE id = 'g-1'")
        conn.execute("INSERT INTO grants (id, key, policy_id, task_id, scope, max_calls, used, "
                     "revoked, data) VALUES (?, 'k', 'p', 't-1', 'always', NULL, 1, 0, ?)",
                     (row.id, row.model_dump_json()))
    finally:
        conn.close()
    await store.get_task("t-none")  # any call: what a daemon's worker does every poll
    assert await ids(store) == ["g-3"]


async def test_without_a_grant_mark_nothing_is_cached_and_grants_stay_put(
        tmp_path: Path) -> None:
    """When the mark cannot be opened (a directory in its place), look-ups read the
    database and a change of grants is refused (another process may rely on the mark)."""
    db = tmp_path / "store.db"
    first = SqliteTaskStore(url=f"sqlite:///{db}")
    await first.open()
    assert await first.commit(Change(at=NOW, grants=[grant(1)]))
    await first.close()
    Path(f"{db}-grants").unlink()
    Path(f"{db}-grants").mkdir()
    store = SqliteTaskStore(url=f"sqlite:///{db}")
    await store.open()
    try:
        assert await ids(store) == ["g-1"] and await ids(store) == ["g-1"]
        assert store.grant_cache.hits == 0
        with pytest.raises(StoreError, match=r"store\.db-grants"):
            await store.commit(Change(at=NOW, grant_revokes=["g-1"]))
        assert await ids(store) == ["g-1"]
    finally:
        await store.close()


async def test_a_cached_grant_lapses_at_its_time(store: SqliteTaskStore) -> None:
    """The cache keeps what was read; whether it still covers is judged at the given now."""
    end = NOW + timedelta(minutes=5)
    assert await store.commit(Change(at=NOW, grants=[grant(1, expires_at=end)]))
    await store.grant_candidates("k")
    cached = await store.grant_candidates("k")
    assert first_valid(cached, task_id="t-1", now=end - timedelta(seconds=1)) is not None
    assert first_valid(cached, task_id="t-1", now=end) is None


async def test_returned_grants_are_copies(store: SqliteTaskStore) -> None:
    """Changing a returned grant changes neither the cache nor a later answer."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    await store.grant_candidates("k")
    [first] = await store.grant_candidates("k")
    first.revoked_at = NOW
    [again] = await store.grant_candidates("k")
    assert again.revoked_at is None


async def test_reopened_store_starts_empty_and_still_caches(store: SqliteTaskStore) -> None:
    """Closing drops the cache and its mapping; after reopening it works as before."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    assert await ids(store) == ["g-1"]
    await store.close()
    await store.open()
    hits = store.grant_cache.hits
    assert await ids(store) == ["g-1"] and await ids(store) == ["g-1"]
    assert store.grant_cache.hits == hits + 1


async def test_a_read_made_while_another_store_changes_grants_is_not_kept(
        store: SqliteTaskStore, db: Path) -> None:
    """Read between another store's first move of the mark and its commit, an entry is
    dropped once that store's transaction has ended (the mark moves again)."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    conn = sqlite3.connect(db, isolation_level=None)
    writer = GrantCache(str(db))  # what the other store's thread runs, step by step
    try:
        writer.attach(conn)
        conn.execute("BEGIN IMMEDIATE")
        writer.changing()  # about to revoke g-1
        conn.execute("UPDATE grants SET revoked = 1 WHERE id = 'g-1'")
        assert await ids(store) == ["g-1"]  # read before the commit
        conn.execute("COMMIT")
        writer.refresh(conn)  # the end of the other store's batch
        assert await ids(store) == []
    finally:
        writer.detach()
        conn.close()
