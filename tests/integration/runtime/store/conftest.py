"""Fixtures of the store tests: every store backend, opened and empty."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import TaskStore
from signoff.runtime.store.postgres.store import PgTaskStore
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.store.sqlite.store import SqliteTaskStore


@pytest.fixture(params=["memory", "sqlite", "sqlalchemy-sqlite",
                        pytest.param("postgres", marks=pytest.mark.postgres),
                        pytest.param("sqlalchemy-postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    """Each backend in turn, opened and empty (SQLite and PostgreSQL twice each: the store
    the daemon uses for it, and the generic SQLAlchemy one)."""
    if request.param == "memory":
        s: TaskStore = MemTaskStore()
    elif request.param == "sqlite":
        s = SqliteTaskStore(url=f"sqlite:///{tmp_path / 'store.db'}")
    elif request.param == "sqlalchemy-sqlite":
        s = SqlTaskStore(url=f"sqlite:///{tmp_path / 'store.db'}")
    elif request.param == "postgres":
        s = PgTaskStore(url=request.getfixturevalue("pg_url"))
    else:
        s = SqlTaskStore(url=request.getfixturevalue("pg_url"))
    await s.open()
    yield s
    await s.close()
