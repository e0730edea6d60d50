"""Which store serves a database URL: the one place that decides.

A SQLite file gets `SqliteTaskStore` (one thread, group commit, named hot queries);
PostgreSQL gets `PgTaskStore` (its per-task statements on async psycopg); every other
URL — SQLite in memory or by URI filename, other drivers — the plain `SqlTaskStore`.
"""

from __future__ import annotations

from signoff.runtime.signing import Signer
from signoff.runtime.store.port import TaskStore
from signoff.runtime.store.postgres.store import PgTaskStore, is_psycopg
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.store.sqlite.store import SqliteTaskStore, sqlite_path


def make_store(url: str, *, signer: Signer | None = None) -> TaskStore:
    """The store for ``url`` (not opened yet: call ``await store.open()``); with a
    ``signer``, the audit events it seals are signed."""
    if sqlite_path(url) is not None:
        return SqliteTaskStore(url=url, signer=signer)
    if is_psycopg(url):
        return PgTaskStore(url=url, signer=signer)
    return SqlTaskStore(url=url, signer=signer)
