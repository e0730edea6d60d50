"""`SqlReplayLedger`: the replay ledger shared by every node on one PostgreSQL.

One table, ``replay_keys (key PRIMARY KEY, expires_at)``. Recording a request is ONE
statement: insert every key, and where a key exists but has expired, take it over::

    INSERT … ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at
        WHERE replay_keys.expires_at <= :now RETURNING key

The request is new exactly when every key came back. The primary key makes two nodes
inserting the same key at once serialize: one gets it, the other sees a conflict, so a
request is acted on by one node whichever receives it. Rows past their expiry are
deleted every `PRUNE_EVERY` (by the node's Clock), so the table stays as small as the
traffic of the last few minutes.

It runs on its own psycopg connection (one statement at a time, reconnected when it
breaks), not on the store's pool: it is the inbound path of a surface, and must neither
wait behind the store's work nor depend on how the store is built. A failure raises
`StoreError`; the surface then refuses the request (the platform retries it), it never
acts on it unrecorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from signoff.errors import StoreError
from signoff.runtime.clock import Clock
from signoff.runtime.store.postgres.notify import libpq_url
from signoff.runtime.store.sql.tables import SCHEMA_LOCK

log = logging.getLogger(__name__)

TABLE = "replay_keys"
PRUNE_EVERY = timedelta(minutes=1)
CREATE = (f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, "
          "expires_at TIMESTAMPTZ NOT NULL)",
          f"CREATE INDEX IF NOT EXISTS {TABLE}_expires ON {TABLE} (expires_at)")
RECORD = (f"INSERT INTO {TABLE} (key, expires_at) "
          "SELECT k, %(exp)s FROM unnest(%(keys)s::text[]) k "
          f"ON CONFLICT (key) DO UPDATE SET expires_at = EXCLUDED.expires_at "
          f"WHERE {TABLE}.expires_at <= %(now)s RETURNING key")
PRUNE = f"DELETE FROM {TABLE} WHERE expires_at <= %(now)s"


class SqlReplayLedger:
    """A `signoff.runtime.replay.ReplayLedger` in a PostgreSQL table."""

    def __init__(self, *, url: str, clock: Clock, timeout: float = 5.0) -> None:
        self.conninfo = libpq_url(url)
        self.clock = clock
        self.timeout = timeout
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self._pruned_at: datetime | None = None

    async def first_time(self, keys: Sequence[str], *, ttl: timedelta) -> bool:
        """Record ``keys`` for ``ttl``; False when any was recorded before and has not
        expired."""
        import psycopg

        unique = list(dict.fromkeys(keys))
        now = self.clock.now()
        expires_at = now + ttl
        try:
            async with self._lock, asyncio.timeout(self.timeout):
                conn = await self._connection(psycopg)
                cur = await conn.execute(RECORD, {"keys": unique, "exp": expires_at,
                                                  "now": now})
                got = len(await cur.fetchall())
                if self._pruned_at is None or now - self._pruned_at >= PRUNE_EVERY:
                    self._pruned_at = now
                    await conn.execute(PRUNE, {"now": now})
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self._drop()
            raise StoreError(f"replay ledger: {_first_line(exc)}") from exc
        return got == len(unique)

    async def count(self) -> int:
        """Rows in the table (tests and benchmarks)."""
        import psycopg

        async with self._lock:
            conn = await self._connection(psycopg)
            cur = await conn.execute(f"SELECT count(*) FROM {TABLE}")
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async def run(self) -> None:
        """A daemon service: nothing to do but close the connection at shutdown."""
        try:
            await asyncio.Event().wait()
        finally:
            await self.close()

    async def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        async with self._lock:
            await self._drop()

    async def _connection(self, psycopg: Any) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                     connect_timeout=10,
                                                     application_name="signoff-replay")
        try:
            # Under the lock the store creates its tables with: nodes started together
            # raced here (DuplicateObject on the table's type) and refused a Slack request.
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                for statement in CREATE:
                    await conn.execute(statement)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception as exc:  # closing a broken connection may fail; it is gone
                log.debug("replay_close_failed", extra={"error": _first_line(exc)})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
