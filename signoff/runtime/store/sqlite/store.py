"""`SqliteTaskStore`: the SQL store on a SQLite file, on one thread that owns its connection.

It is `SqlTaskStore` with its two seams replaced — `_run` (where a database call runs)
and `_tx` (what a transaction is) — so every SQLAlchemy read and write of the SQL store,
including ones added there later, works here unchanged, executed by the store's thread
(`thread.py`) over its single sqlite3 connection. Only the hot statements take a shorter
way, as named queries (`queries.py`): the task insert, claim and save, an agent turn's
transcript rows, and six reads; and the changes of outside requests (`requests.py`).

Why one thread and one connection: no sqlite3 call may run on the event loop, and SQLite
serializes writers anyway. The connection is opened by that thread with sqlite3's
``check_same_thread`` left on, so any use from another thread raises instead of blocking.
Why it keeps up with the old inline path: concurrent units of work (the worker's consumers
finishing at once) are group-committed in one transaction, each under its own savepoint,
and a burst of calls costs one hand-over each way (see `thread.py` for why that order of
execution is safe).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from signoff.errors import StoreError
from signoff.runtime import audit as audit_chain
from signoff.runtime.models import Approval, AuditEvent, Grant, Task, TaskState
from signoff.runtime.signing import Signer
from signoff.runtime.store.port import CardRecord, Change, OutboxItem, Page
from signoff.runtime.store.sql.rows import (
    CACHE_KIB,
    only_request,
    only_task,
    only_turn,
    safe_url,
)
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.store.sql.writes import Lost
from signoff.runtime.store.sqlite import queries as q
from signoff.runtime.store.sqlite import requests
from signoff.runtime.store.sqlite.grants import GrantCache
from signoff.runtime.store.sqlite.thread import Kind, StoreThread
from signoff.runtime.transcript import TranscriptEntry

T = TypeVar("T")
BUSY_MS = 30_000  # how long a write waits for another process's lock (in the thread)


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL, or None when it is not one (memory, URI, other database)."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return None
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or parsed.query.get("uri"):
        return None  # URI filenames (shared memory, read-only, …): the generic path
    return database


class SqliteTaskStore(SqlTaskStore):
    """The durable store on a SQLite file (``url`` is ``sqlite:///path``)."""

    # Not SqlTaskStore.__init__: that one builds pooled engines and a thread pool; this
    # store has one connection, made and used by one thread.
    def __init__(self, *, url: str, signer: Signer | None = None) -> None:
        path = sqlite_path(url)
        if path is None:
            raise StoreError(f"not a SQLite file: {safe_url(url)}")
        self.url = url
        self.sealer = audit_chain.Sealer(signer)
        self.is_sqlite = True
        self.path = path
        self.grant_cache = GrantCache(path)
        self._thread = StoreThread(connect=self._connect, close=self._disconnect,
                                   label=safe_url(url), after_batch=self._after_batch)
        # SQLAlchemy compiles and runs statements over the thread's own connection; the
        # transactions are begun and ended in plain SQL by `_tx` and by the thread's group
        # commit, so SQLAlchemy must never commit or roll back on its own.
        engine = sa.create_engine("sqlite+pysqlite://", creator=lambda: self._thread.conn,
                                  poolclass=sa.pool.StaticPool, pool_reset_on_return=None,
                                  skip_autocommit_rollback=True)
        self._write = self._read = engine
        self._sa: Connection | None = None
        self._in_unit = False

    @property
    def commits(self) -> int:
        """Write transactions committed so far (for benchmarks)."""
        return self._thread.commits

    # -- the thread's connection --------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:  # see CACHE_KIB in sql/rows.py
        conn = sqlite3.connect(self.path, timeout=BUSY_MS / 1000, isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", f"busy_timeout={BUSY_MS}",
                       "foreign_keys=ON", f"cache_size={CACHE_KIB}"):
            conn.execute(f"PRAGMA {pragma}")
        self.grant_cache.attach(conn)
        return conn

    def _after_batch(self) -> None:
        self.grant_cache.refresh(self._thread.conn)  # see GrantCache.refresh

    def _disconnect(self) -> None:
        self.grant_cache.detach()
        if self._sa is not None:
            self._sa.close()
            self._sa = None
        self._write.dispose()

    def _connection(self) -> Connection:
        """The SQLAlchemy view of the thread's connection (on the thread only)."""
        if self._sa is None:
            self._sa = self._write.connect()
        return self._sa

    # -- the two seams of SqlTaskStore -----------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a function of the SQL store on the thread, by itself."""
        result: T = await self._thread.submit(Kind.ALONE, lambda: fn(*args))
        return result

    @contextmanager
    def _tx(self, *, write: bool = True) -> Iterator[Connection]:
        """A transaction on the thread's connection; inside a group, the unit's savepoint."""
        conn = self._thread.conn
        with self._errors():
            if self._in_unit:  # the group's transaction is already open
                yield self._connection()
                return
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield self._connection()
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            if write:
                self._thread.commits += 1

    def _reset(self) -> dict[str, int]:
        self._grants_changing()  # every grant is about to go
        return super()._reset()

    def _grants_changing(self) -> None:
        """Before grants change: move the grant mark (see grants.py), or change nothing."""
        try:
            self.grant_cache.changing()
        except OSError as exc:
            raise StoreError(f"cannot write {self.grant_cache.mark_path}: {exc}") from exc

    async def close(self) -> None:
        """Close the connection in its thread and end the thread."""
        await self._thread.stop()

    # -- the unit of work -------------------------------------------------------------------
    async def _commit_unit(self, change: Change) -> list[AuditEvent]:
        """One Change, group-committed with the others submitted at the same time."""
        sealed: list[AuditEvent] = await self._thread.submit(Kind.UNIT,
                                                             lambda: self._unit(change))
        return sealed

    def _unit(self, ch: Change) -> list[AuditEvent]:
        if ch.grants or ch.grant_revokes:
            self._grants_changing()
        if ch.task is not None and only_task(ch):  # one statement: atomic by itself
            try:
                if ch.insert:
                    q.insert_task(self._thread.conn, ch.task)
                else:
                    q.update_task(self._thread.conn, ch.task)
            except sqlite3.IntegrityError:
                raise Lost from None
            return []
        if only_turn(ch):  # an agent turn: its new messages, perhaps with its task
            try:
                with self._thread.savepoint():
                    if ch.task is not None and ch.insert:
                        q.insert_task(self._thread.conn, ch.task)
                    elif ch.task is not None:
                        q.update_task(self._thread.conn, ch.task)
                    q.append_transcript(self._thread.conn, ch.transcript, ch.at)
            except sqlite3.IntegrityError:
                raise Lost from None
            return []
        if only_request(ch):  # an outside request's change: named statements, one savepoint
            try:
                with self._thread.savepoint():
                    return requests.request_change(self._thread.conn, ch, self.sealer)
            except sqlite3.IntegrityError:
                raise Lost from None
        # The SQL store's own unit of work, its statements made one by a savepoint.
        self._in_unit = True
        try:
            with self._thread.savepoint():
                return self._commit(ch)
        finally:
            self._in_unit = False

    async def claim_next(self, node_id: str, lease_until: datetime) -> Task | None:
        """Take the oldest queued task atomically (grouped with concurrent claims)."""
        claimed: Task | None = await self._thread.submit(Kind.UNIT, lambda: q.claim_next(
            self._thread.conn, node_id, lease_until, TaskState.QUEUED))
        return claimed

    # -- hot reads ----------------------------------------------------------------------------
    async def _query(self, fn: Callable[..., T], *args: Any) -> T:
        result: T = await self._thread.submit(Kind.READ,
                                              lambda: fn(self._thread.conn, *args))
        return result

    async def get_task(self, task_id: str) -> Task | None:
        """One task by id."""
        return await self._query(q.get_task, task_id)

    async def get_approval(self, approval_id: str) -> Approval | None:
        """One approval request."""
        return await self._query(q.get_approval, approval_id)

    async def find_request(self, idempotency_key: str) -> Approval | None:
        """The outside request stored under an idempotency key."""
        return await self._query(requests.find_request, idempotency_key)

    async def grant_candidates(self, key: str) -> list[Grant]:
        """Unrevoked grants under ``key``, oldest first: from the cache while the file is
        unchanged (no hand-over to the thread), else read on the thread and remembered."""
        found = self.grant_cache.lookup(key)
        if found is None:
            read = await self._query(self.grant_cache.load, key)
            self.grant_cache.remember(key, read)
            found = read.grants
        # A Grant holds only immutable values: a shallow copy cannot leak cached state.
        return [g.model_copy() for g in found]

    async def cards(self, approval_id: str) -> list[CardRecord]:
        """Posted copies of an approval's card."""
        return await self._query(q.cards, approval_id)

    async def due_outbox(self, now: datetime, *, limit: int = 50) -> list[OutboxItem]:
        """Undelivered items whose time has come, oldest first."""
        return await self._query(q.due_outbox, now, limit)

    async def transcript(self, task_id: str, *, after: int = -1,
                         limit: int = 500) -> Page[TranscriptEntry]:
        """Transcript entries after a seq, oldest first."""
        entries = await self._query(q.transcript, task_id, after, limit + 1)
        more = len(entries) > limit
        entries = entries[:limit]
        return Page(entries, str(entries[-1].seq) if more else None)

