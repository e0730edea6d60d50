"""`PgTaskStore`: the SQL store on PostgreSQL, its per-task hot path on async psycopg.

It is `SqlTaskStore` (every method, every SQLAlchemy statement, the same tables) with the
statements every task makes taken past SQLAlchemy and the thread pool, onto a psycopg 3
`AsyncConnectionPool` of the event loop itself:

- submit: one ``INSERT`` (atomic by itself: one round trip), then a wake-up of idle
  nodes (``NOTIFY``) sent after it commits, one at a time, shared by every insert that
  committed while the previous one was on its way (see `_wake_nodes` for why not in
  the insert's own transaction);
- claim: one ``UPDATE … WHERE seq IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)
  RETURNING``; the worker's consumers asking at the same moment share one statement, so a
  deep queue is claimed in batches of as many tasks as there are idle consumers (never
  more: a task claimed ahead of a consumer would hold a lease nobody renews);
- save (a task write with nothing else in its Change), renew a lease, read a task, the
  outbox dispatcher's look for due items (every 0.2 s and on each wake-up): one
  statement each.

Why: measured by bench/cluster.py, the thread hop and SQLAlchemy's per-statement work
were most of a task's cost on PostgreSQL (the server does little per task). Every other
unit of work — approvals, grants, audit appends, outside requests — still goes through
`SqlTaskStore` unchanged, so each rule of the write side stays written once, in
`writes.py` — on SQLAlchemy's asyncio engine, in a greenlet on the event loop, never in
a thread (see `_run`). Statements are prepared by the server on first use (``prepare_threshold``):
the hot ones run thousands of times.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.util import greenlet_spawn

from signoff.errors import StoreError
from signoff.runtime.models import AuditEvent, Task, TaskState
from signoff.runtime.store.port import Change, OutboxItem
from signoff.runtime.store.sql.notify import CHANNEL, libpq_url
from signoff.runtime.store.sql.rows import only_task, safe_url, task_cols, task_from
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.store.sql.writes import Lost

log = logging.getLogger(__name__)
T = TypeVar("T")
POOL_SIZE = 10  # connections of the hot path's pool unless the node says otherwise
NOTIFY_FLUSH = 5.0  # seconds close() waits for the wake-up owed to the last inserts
COLD_POOL = 4  # connections of SQLAlchemy's engine (approvals, sweeps, registry, reads)
PREPARE_THRESHOLD = 0  # prepare every statement on its first execution (they repeat)

_COLS = "seq, id, state, schedule, fire_time, claimed_by, lease_until, version, data"
_INSERT = ("INSERT INTO tasks (id, state, schedule, fire_time, claimed_by, lease_until, "
           "version, needs_plan, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)")
_NOTIFY = "SELECT pg_notify(%s, %s)"  # CHANNEL, the store's wakeup_sender
_UPDATE = ("UPDATE tasks SET state = %s, schedule = %s, fire_time = %s, claimed_by = %s, "
           "lease_until = %s, version = %s, needs_plan = %s, data = %s "
           "WHERE id = %s AND version = %s")
_STARTED = ("CASE WHEN needs_plan THEN 'planning' ELSE 'in_progress' END")
# The pick is a MATERIALIZED CTE, not ``seq IN (SELECT …)``: a planner may run such a
# subquery more than once per statement (seen here: LIMIT 1 claimed two rows).
_CLAIM_BATCH = ("WITH picked AS MATERIALIZED (SELECT seq FROM tasks WHERE state = 'queued' "
                "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED) "
                f"UPDATE tasks SET state = {_STARTED}, claimed_by = %s, lease_until = %s, "
                "version = version + 1 FROM picked WHERE tasks.seq = picked.seq "
                f"RETURNING {', '.join('tasks.' + c for c in _COLS.split(', '))}")
_CLAIM_ONE = (f"UPDATE tasks SET state = {_STARTED}, claimed_by = %s, lease_until = %s, "
              "version = version + 1 WHERE id = %s AND state = %s "
              f"RETURNING {_COLS}")
_RENEW = "UPDATE tasks SET lease_until = %s WHERE id = %s AND claimed_by = %s"
_GET = f"SELECT {_COLS} FROM tasks WHERE id = %s"
_DUE_OUTBOX = ("SELECT key, surface, kind, payload, approval_id, id, attempts, next_at, error "
               "FROM outbox WHERE done = false AND next_at <= %s ORDER BY id LIMIT %s")


def is_psycopg(url: str) -> bool:
    """True for a PostgreSQL URL on psycopg 3 (``postgresql+psycopg://``), what this serves."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return False
    return parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg"


@dataclass(frozen=True)
class _Row:
    """A tasks row as `task_from` reads it (attribute access, aware datetimes)."""

    seq: int
    id: str
    state: str
    schedule: str | None
    fire_time: datetime | None
    claimed_by: str | None
    lease_until: datetime | None
    version: int
    data: str


def _aware(value: datetime | None) -> datetime | None:
    # The columns are `timestamp without time zone` holding UTC (see tables.UtcDateTime).
    return value.replace(tzinfo=UTC) if value is not None else None


def _naive(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("naive datetime given to the store (use aware UTC)")
    return value.astimezone(UTC).replace(tzinfo=None)


def _task(row: tuple[Any, ...]) -> Task:
    seq, task_id, state, schedule, fire_time, claimed_by, lease_until, version, data = row
    return task_from(_Row(seq, task_id, state, schedule, _aware(fire_time), claimed_by,
                          _aware(lease_until), version, data))


def _task_params(task: Task, version: int) -> list[Any]:
    c = task_cols(task, version)
    return [c["state"], c["schedule"], _naive(c["fire_time"]), c["claimed_by"],
            _naive(c["lease_until"]), c["version"], c["needs_plan"], c["data"]]


@dataclass
class _Claim:
    """One consumer waiting for a queued task."""

    node_id: str
    lease_until: datetime
    done: asyncio.Future[Task | None]


class PgTaskStore(SqlTaskStore):
    """The durable store on PostgreSQL (``url`` is ``postgresql+psycopg://…``)."""

    # Not SqlTaskStore.__init__: that one builds a sync engine and a thread pool; here
    # SQLAlchemy runs on its asyncio engine, on the event loop (see `_run`).
    def __init__(self, *, url: str, pool_size: int = POOL_SIZE) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        self.url = url
        self.is_sqlite = False
        self.wakeup_sender = secrets.token_hex(8)  # payload of this store's wake-ups
        try:
            self._engine = create_async_engine(url, pool_pre_ping=True, pool_size=COLD_POOL,
                                               max_overflow=COLD_POOL)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {safe_url(url)}: {exc}") from exc
        self._write = self._read = self._engine.sync_engine
        self.pool_size = max(pool_size, 2)
        self._apool: Any = None  # psycopg_pool.AsyncConnectionPool once open
        self._waiting: list[_Claim] = []
        self._claiming: asyncio.Lock | None = None
        self._notify_again = False
        self._notifier: asyncio.Task[None] | None = None

    # -- connections --------------------------------------------------------------------
    async def open(self) -> None:
        """Create the tables (the SQL store's way), then fill the async pool. Opening an
        open store does nothing (the daemon's CLI and `Daemon.start` both open it: a
        second pool would replace the first and leak its connections)."""
        if self._apool is not None:
            return
        await super().open()
        try:
            from psycopg_pool import AsyncConnectionPool
        except ImportError as exc:  # pragma: no cover - the postgres extra brings it
            raise StoreError("PostgreSQL needs psycopg-pool (pip install 'signoff[postgres]')"
                             ) from exc
        pool = AsyncConnectionPool(
            libpq_url(self.url), min_size=min(2, self.pool_size), max_size=self.pool_size,
            open=False, name="signoff-store",
            kwargs={"autocommit": True, "prepare_threshold": PREPARE_THRESHOLD,
                    "application_name": "signoff"})
        try:
            await pool.open(wait=True, timeout=30)
        except Exception as exc:
            await pool.close()
            raise StoreError(f"cannot open database {safe_url(self.url)}: {exc}") from exc
        self._apool = pool
        self._claiming = asyncio.Lock()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a function of the SQL store on the event loop, in a greenlet.

        Not in a thread: with any thread busy, every call into psycopg that releases the
        GIL pays up to the interpreter's switch interval to take it back (measured here:
        a 0.7 ms query took 4.6 ms beside one busy thread), so the SQL store's thread pool
        slowed the async hot path too. SQLAlchemy's asyncio engine runs the same
        synchronous code in a greenlet whose every database wait is an await.
        """
        return await greenlet_spawn(fn, *args)

    async def close(self) -> None:
        """Close the async pool, then the SQL store's engine."""
        if self._notifier is not None:
            # Send the wake-up still owed for the last inserts (a short-lived submitter
            # closes right after its insert), but never hang a shutdown on it.
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(NOTIFY_FLUSH):
                    await asyncio.shield(self._notifier)
            self._notifier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._notifier
            self._notifier = None
        if self._apool is not None:
            await self._apool.close()
            self._apool = None
        await self._engine.dispose()

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        """A pooled autocommit connection; database failures as `StoreError`."""
        import psycopg

        if self._apool is None:
            raise StoreError(f"database {safe_url(self.url)} is not open")
        try:
            async with self._apool.connection() as conn:
                yield conn
        except (Lost, psycopg.IntegrityError):
            raise
        except psycopg.OperationalError as exc:
            raise StoreError(f"database {safe_url(self.url)} failed: {exc}") from exc

    # -- the unit of work -----------------------------------------------------------------
    async def _commit_unit(self, change: Change) -> list[AuditEvent]:
        """A Change of nothing but its task in one statement; anything else the SQL way."""
        if change.task is None or not only_task(change):
            return await super()._commit_unit(change)
        import psycopg

        task = change.task
        try:
            async with self._conn() as conn:
                if change.insert:
                    await conn.execute(_INSERT, [task.id, *_task_params(task, task.version)])
                    if task.state is TaskState.QUEUED:
                        self._wake_nodes()
                    return []
                cur = await conn.execute(_UPDATE, [*_task_params(task, task.version + 1),
                                                   task.id, task.version])
                if cur.rowcount != 1:
                    raise Lost
        except psycopg.IntegrityError:  # a duplicate id or schedule fire time
            raise Lost from None
        return []

    def _wake_nodes(self) -> None:
        """Have idle nodes look at the queue: a NOTIFY soon, shared with other inserts.

        Not in the insert's transaction, measured: PostgreSQL serializes the commits of
        transactions that NOTIFY (one global lock on the notification queue, held through
        the commit's WAL flush), so a NOTIFY per insert made every submission of every
        node wait for the one before it (~38 tasks/s whatever the concurrency, on this
        machine). Sent after the commit, the notification still never announces a row
        that is not there; at most one is on its way, and every insert that committed
        meanwhile is announced by the next one. A node that dies between its commit and
        the NOTIFY leaves the task to the other nodes' polling (``daemon.poll_interval``).
        """
        self._notify_again = True
        if self._notifier is None or self._notifier.done():
            self._notifier = asyncio.get_running_loop().create_task(
                self._send_wakeups(), name="signoff-store-notify")

    async def _send_wakeups(self) -> None:
        while self._notify_again:
            self._notify_again = False
            try:
                async with self._conn() as conn:
                    await conn.execute(_NOTIFY, [CHANNEL, self.wakeup_sender])
            except Exception as exc:  # the other nodes' polling finds the task anyway
                log.warning("notify_send_failed", extra={"error": str(exc)})
                return

    # -- claims ---------------------------------------------------------------------------
    async def claim_next(self, node_id: str, lease_until: datetime) -> Task | None:
        """The oldest queued task; consumers asking together share one batch claim."""
        loop = asyncio.get_running_loop()
        me = _Claim(node_id, lease_until, loop.create_future())
        self._waiting.append(me)
        lock = self._claiming
        if lock is None:
            raise StoreError(f"database {safe_url(self.url)} is not open")
        try:
            async with lock:  # one batch at a time: it serves everyone waiting
                if not me.done.done():
                    await self._claim_batch()
        except asyncio.CancelledError:
            if not me.done.done():
                me.done.cancel()  # whichever batch holds it skips it
            raise
        return me.done.result()

    async def _claim_batch(self) -> None:
        batch = [c for c in self._waiting if not c.done.done()]
        self._waiting = []
        by_node: dict[str, list[_Claim]] = {}
        for c in batch:
            by_node.setdefault(c.node_id, []).append(c)
        try:
            for node_id, claims in by_node.items():
                lease = max(c.lease_until for c in claims)
                async with self._conn() as conn:
                    cur = await conn.execute(_CLAIM_BATCH, [len(claims), node_id,
                                                            _naive(lease)])
                    rows = await cur.fetchall()
                tasks = [_task(r) for r in sorted(rows, key=lambda r: int(r[0]))]
                for c in claims:
                    if not c.done.done():
                        c.done.set_result(tasks.pop(0) if tasks else None)
        except Exception as exc:  # every waiter sees the failure (the caller's own too)
            for c in batch:
                if not c.done.done():
                    c.done.set_exception(exc)
        except BaseException:
            # The claiming consumer was cancelled (shutdown): the others just find no task
            # this time. Rows a cancelled statement may have claimed come back after their
            # lease, like those of a node that died (`Engine.recover`).
            for c in batch:
                if not c.done.done():
                    c.done.set_result(None)
            raise

    async def claim(self, task_id: str, node_id: str, lease_until: datetime,
                    from_state: TaskState) -> Task | None:
        """Take one given task atomically if it is in ``from_state``."""
        async with self._conn() as conn:
            cur = await conn.execute(_CLAIM_ONE, [node_id, _naive(lease_until), task_id,
                                                  from_state.value])
            row = await cur.fetchone()
        return _task(row) if row else None

    async def renew_lease(self, task_id: str, node_id: str, lease_until: datetime) -> None:
        """Extend a lease this node holds."""
        async with self._conn() as conn:
            await conn.execute(_RENEW, [_naive(lease_until), task_id, node_id])

    async def get_task(self, task_id: str) -> Task | None:
        """One task by id."""
        async with self._conn() as conn:
            cur = await conn.execute(_GET, [task_id])
            row = await cur.fetchone()
        return _task(row) if row else None

    async def due_outbox(self, now: datetime, *, limit: int = 50) -> list[OutboxItem]:
        """Undelivered items whose time has come, oldest first."""
        async with self._conn() as conn:
            cur = await conn.execute(_DUE_OUTBOX, [_naive(now), limit])
            rows = await cur.fetchall()
        return [OutboxItem(key=key, surface=surface, kind=kind, payload=json.loads(payload),
                           approval_id=approval_id, id=item_id, attempts=attempts,
                           next_at=_aware(next_at), error=error)
                for key, surface, kind, payload, approval_id, item_id, attempts, next_at, error
                in rows]
