"""One factory picks the store for a database URL."""

from __future__ import annotations

import pytest

from signoff.errors import StoreError
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.postgres.store import PgTaskStore
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.store.sqlite.store import SqliteTaskStore


@pytest.mark.parametrize("url", ["sqlite:///signoff-work/signoff.db", "sqlite:////var/lib/x.db",
                                 "sqlite+pysqlite:////tmp/x.db"])
def test_a_sqlite_file_gets_the_sqlite_store(url: str) -> None:
    """A SQLite file is served by SqliteTaskStore."""
    assert type(make_store(url)) is SqliteTaskStore


@pytest.mark.parametrize("url", ["postgresql+psycopg://u@127.0.0.1:5432/db",
                                 "postgresql+psycopg://u@db.example.com/signoff"])
def test_postgresql_gets_the_async_psycopg_store(url: str) -> None:
    """PostgreSQL through psycopg is served by PgTaskStore (its hot path on an async pool)."""
    assert type(make_store(url)) is PgTaskStore


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:",
                                 "sqlite:///file:x.db?mode=ro&uri=true"])
def test_anything_else_gets_the_sqlalchemy_store(url: str) -> None:
    """SQLite in memory and URI filenames take the plain SQLAlchemy store."""
    assert type(make_store(url)) is SqlTaskStore


def test_the_sqlite_store_refuses_what_is_not_a_sqlite_file() -> None:
    """SqliteTaskStore built by hand on another URL says what is wrong."""
    with pytest.raises(StoreError, match="not a SQLite file"):
        SqliteTaskStore(url="sqlite://")
