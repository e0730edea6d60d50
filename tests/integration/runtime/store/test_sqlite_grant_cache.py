"""`SqliteTaskStore`'s grant cache: answers on the loop while the file is unchanged, and
never returns a grant that a write — its own, another store's, another process's — has
revoked, nor misses one that a write has added."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from signoff.runtime.models import Grant, RiskClass, Scope
from signoff.runtime.policy.grants import first_valid
from signoff.runtime.store.port import Change
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


async def test_a_revoke_by_another_process_is_seen_at_once(store: SqliteTaskStore,
                                                           db: Path) -> None:
    """A plain UPDATE from another process (no signoff code) ends the cached grant."""
    assert await store.commit(Change(at=NOW, grants=[grant(1)]))
    assert await ids(store) == ["g-1"] and await ids(store) == ["g-1"]
    script = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
              "c.execute(\"UPDATE grants SET revoked = 1 WHERE id = 'g-1'\")")
    subprocess.run([sys.executable, "-c", script, str(db)], check=True, timeout=60)
    assert await ids(store) == []


async def test_a_write_of_this_process_outside_the_store_is_seen(store: SqliteTaskStore,
                                                                 db: Path) -> None:
    """An insert through a raw sqlite3 connection (another connection) shows next."""
    assert await ids(store) == [] and await ids(store) == []
    row = grant(3)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("INSERT INTO grants (id, key, policy_id, task_id, scope, max_calls, used, "
                     "revoked, data) VALUES (?, 'k', 'p', 't-1', 'always', NULL, 1, 0, ?)",
                     (row.id, row.model_dump_json()))
    finally:
        conn.close()
    assert await ids(store) == ["g-3"]


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
