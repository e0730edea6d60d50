"""`PgTaskStore`: the SQL store on PostgreSQL, its per-task hot path on async psycopg.

It is `SqlTaskStore` (every method, every SQLAlchemy statement, the same tables) with the
statements every task makes taken past SQLAlchemy and the thread pool, onto a psycopg 3
`AsyncConnectionPool` of the event loop itself:

- submit: one ``INSERT`` (atomic by itself: one round trip), then a wake-up of idle
  nodes (``NOTIFY``) sent after it commits, one at a time and at most one per
  ``notify_gap``, shared by every insert that committed meanwhile (see `_wake_nodes`
  for why not in the insert's own transaction);
- claim: one ``UPDATE … WHERE seq IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)
  RETURNING``; the worker's consumers asking at the same moment share one statement, so a
  deep queue is claimed in batches of as many tasks as there are idle consumers (never
  more: a task claimed ahead of a consumer would hold a lease nobody renews);
- save (a task write with nothing else in its Change): one ``UPDATE`` compare-and-set
  on the version;
- inserts, claims and saves made at the same moment by different tasks share one
  statement and one commit (`shared.Shared`: group commit), each keeping its own
  outcome;
- renew a lease, read a task, the outbox dispatcher's look for due items (every 0.2 s
  and on each wake-up): one statement each.

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
import functools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.util import greenlet_spawn

from signoff.errors import StoreError
from signoff.runtime import audit as audit_chain
from signoff.runtime.models import Approval, AuditEvent, Task, TaskState
from signoff.runtime.signing import Signer
from signoff.runtime.store.outage import store_error
from signoff.runtime.store.port import Change, OutboxItem
from signoff.runtime.store.postgres.notify import libpq_url
from signoff.runtime.store.postgres.shared import Shared
from signoff.runtime.store.readers import read_approval, read_payload
from signoff.runtime.store.sql.request_steps import Dialect, Many, One, request_steps
from signoff.runtime.store.sql.rows import (
    PG_SESSION_OPTIONS,
    only_request,
    only_task,
    read_engine,
    safe_url,
    task_cols,
    task_from,
)
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.store.sql.writes import CHANNEL, Lost

log = logging.getLogger(__name__)
T = TypeVar("T")
POOL_SIZE = 10  # connections of the hot path's pool unless the node says otherwise
NOTIFY_FLUSH = 5.0  # seconds close() waits for the wake-up owed to the last inserts
# Seconds between two wake-ups of one node: an idle node hears of a task within this and a
# round trip (the contract's bound is 100 ms); a lone submission's goes out at once.
NOTIFY_GAP = 0.025
COLD_POOL = 4  # connections of SQLAlchemy's engine (approvals, sweeps, registry, reads)
PREPARE_THRESHOLD = 0  # prepare every statement on its first execution (they repeat)

_COLS = "seq, id, state, schedule, fire_time, claimed_by, lease_until, version, data"
# Inserts and saves of tasks carry every row waiting at that moment (see shared.py), up
# to ROWS_PER_STATEMENT, as a VALUES list: the planner then knows how few rows come and
# looks each one up by its index (with unnest() of arrays it guessed 100 and scanned the
# whole table on every save). One statement text per row count, each prepared once.
# A row that loses (a duplicate id or schedule fire time; a stale version) is simply not
# in RETURNING.
ROWS_PER_STATEMENT = 16
# A task row's written columns and their types, in the order `_task_params` gives them.
_WRITTEN = {"state": "text", "schedule": "text", "fire_time": "timestamp",
            "claimed_by": "text", "lease_until": "timestamp", "version": "int",
            "needs_plan": "bool", "data": "text"}
_COLUMNS = tuple(_WRITTEN)
_TYPES = tuple(_WRITTEN.values())


@functools.cache
def _insert_sql(rows: int) -> str:
    one = "(" + ", ".join(f"%s::{t}" for t in ("text", *_TYPES)) + ")"
    return (f"INSERT INTO tasks (id, {', '.join(_COLUMNS)}) VALUES "
            + ", ".join([one] * rows) + " ON CONFLICT DO NOTHING RETURNING id")


@functools.cache
def _update_sql(rows: int) -> str:
    values = ", ".join("(" + ", ".join(f"%s::{t}" for t in ("text", "int", *_TYPES))
                       + f", {n})" for n in range(rows))
    return ("UPDATE tasks SET " + ", ".join(f"{c} = v.{c}" for c in _COLUMNS)
            + f" FROM (VALUES {values}) AS v(id, expected, {', '.join(_COLUMNS)}, n) "
            "WHERE tasks.id = v.id AND tasks.version = v.expected RETURNING v.n")


_NOTIFY = "SELECT pg_notify(%s, %s)"  # CHANNEL, the store's wakeup_sender
_STARTED = ("CASE WHEN needs_plan THEN 'planning' ELSE 'in_progress' END")
# The pick is a MATERIALIZED CTE, not ``seq IN (SELECT …)``: a planner may run such a
# subquery more than once per statement (seen here: LIMIT 1 claimed two rows).
# A queued task's claimed_by names the only node that may take it (None: any node).
_CLAIM_BATCH = ("WITH picked AS MATERIALIZED (SELECT seq FROM tasks WHERE state = 'queued' "
                "AND (claimed_by IS NULL OR claimed_by = %s) "
                "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED) "
                f"UPDATE tasks SET state = {_STARTED}, claimed_by = %s, lease_until = %s, "
                "version = version + 1 FROM picked WHERE tasks.seq = picked.seq "
                f"RETURNING {', '.join('tasks.' + c for c in _COLS.split(', '))}")
_CLAIM_ONE = (f"UPDATE tasks SET state = {_STARTED}, claimed_by = %s, lease_until = %s, "
              "version = version + 1 WHERE id = %s AND state = %s "
              f"RETURNING {_COLS}")
_RENEW = "UPDATE tasks SET lease_until = %s WHERE id = %s AND claimed_by = %s"
_GET = f"SELECT {_COLS} FROM tasks WHERE id = %s"
_GET_APPROVAL = "SELECT data, id, task_id, expires_at FROM approvals WHERE id = %s"
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


_PG = Dialect(time=_naive, postgres=True)


def _cancels() -> int:
    """The current task's cancel requests not yet withdrawn (0 outside a task)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def _still_wanted(asked: int) -> None:
    """Raise the cancel that came while a pool was waited on, and was dropped.

    psycopg_pool waits for a free connection in ``asyncio.wait_for``, which on Python 3.11
    returns what it waited for, and drops the cancel, when the cancel lands in the same
    turn of the loop as the connection (CPython gh-86296, fixed in 3.12 only; psycopg
    #1345 and #1413 leave it to the caller). The caller then went on as if it had never been
    told to stop: a worker consumer cancelled at shutdown claimed and polled on forever,
    and the daemon's stop (and the three-node scheduler test, one run in a hundred under
    faketime) waited for it forever. The task still counts such a cancel
    (`asyncio.Task.cancelling`); one more than when the wait began is raised here.
    """
    if _cancels() > asked:
        raise asyncio.CancelledError


def _task(row: tuple[Any, ...]) -> Task:
    seq, task_id, state, schedule, fire_time, claimed_by, lease_until, version, data = row
    return task_from(_Row(seq, task_id, state, schedule, _aware(fire_time), claimed_by,
                          _aware(lease_until), version, data))


def _task_params(task: Task, version: int) -> list[Any]:
    c = task_cols(task, version)
    return [_naive(c[name]) if kind == "timestamp" else c[name]
            for name, kind in _WRITTEN.items()]


@dataclass(frozen=True)
class _Claim:
    """One consumer asking for a queued task."""

    node_id: str
    lease_until: datetime


class _Tied(Exception):
    """A batch and another node's locked the same rows in opposite orders (deadlock)."""


def _untied(write: Callable[[list[Any]], Awaitable[list[bool]]]
            ) -> Callable[[list[Any]], Awaitable[list[bool]]]:
    """``write`` for a `Shared` batch, falling back to one row at a time when PostgreSQL
    broke a deadlock by failing it (one row alone cannot deadlock with a batch)."""

    async def run(rows: list[Any]) -> list[bool]:
        try:
            return await write(rows)
        except _Tied as tied:
            if len(rows) == 1:
                raise StoreError(f"database failed: {tied.__cause__}") from tied.__cause__
            return [ok for row in rows for ok in await run([row])]

    return run


class PgTaskStore(SqlTaskStore):
    """The durable store on PostgreSQL (``url`` is ``postgresql+psycopg://…``)."""

    # Not SqlTaskStore.__init__: that one builds a sync engine and a thread pool; here
    # SQLAlchemy runs on its asyncio engine, on the event loop (see `_run`).
    def __init__(self, *, url: str, pool_size: int = POOL_SIZE,
                 notify_gap: float = NOTIFY_GAP, signer: Signer | None = None) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        self.url = url
        self.sealer = audit_chain.Sealer(signer)
        self.is_sqlite = False
        self.wakeup_sender = secrets.token_hex(8)  # payload of this store's wake-ups
        try:
            self._engine = create_async_engine(url, pool_pre_ping=True, pool_size=COLD_POOL,
                                               max_overflow=COLD_POOL,
                                               connect_args={"options": PG_SESSION_OPTIONS})
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {safe_url(url)}: {exc}") from exc
        self._write = self._engine.sync_engine
        self._read = read_engine(self._write)
        self.pool_size = max(pool_size, 2)
        self.notify_gap = notify_gap
        self._apool: Any = None  # psycopg_pool.AsyncConnectionPool once open
        # The hot path's statements, each shared by everyone asking at the same moment.
        self._inserts = Shared(_untied(self._insert_rows), limit=ROWS_PER_STATEMENT)
        self._saves = Shared(_untied(self._save_rows), limit=ROWS_PER_STATEMENT)
        # A claim cut short (shutdown) finds no task: rows it may have claimed come back
        # after their lease, like those of a node that died (`Engine.recover`).
        self._claims: Shared[_Claim, Task | None] = Shared(self._claim_rows,
                                                            interrupted=lambda: None)
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
                    "options": PG_SESSION_OPTIONS,
                    "application_name": "signoff"})
        try:
            await pool.open(wait=True, timeout=30)
        except Exception as exc:
            await pool.close()
            raise store_error(exc, safe_url(self.url), opening=True) from exc
        self._apool = pool

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a function of the SQL store on the event loop, in a greenlet.

        Not in a thread: with any thread busy, every call into psycopg that releases the
        GIL pays up to the interpreter's switch interval to take it back (measured here:
        a 0.7 ms query took 4.6 ms beside one busy thread), so the SQL store's thread pool
        slowed the async hot path too. SQLAlchemy's asyncio engine runs the same
        synchronous code in a greenlet whose every database wait is an await.
        """
        asked = _cancels()
        result = await greenlet_spawn(fn, *args)
        # SQLAlchemy's pool waits for a free connection in asyncio.wait_for too (see
        # `_still_wanted`): the unit of work is done, but its caller was told to stop.
        _still_wanted(asked)
        return result

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
        asked = _cancels()
        try:
            async with self._apool.connection() as conn:
                _still_wanted(asked)  # before the statement: nothing done yet
                yield conn
        except (Lost, psycopg.IntegrityError):
            raise
        except (psycopg.Error, OSError) as exc:
            raise store_error(exc, safe_url(self.url)) from exc

    # -- the unit of work -----------------------------------------------------------------
    async def _commit_unit(self, change: Change) -> list[AuditEvent]:
        """A Change of nothing but its task in one statement, shared with the Changes of
        other tasks committing at the same moment; one of an outside request in its own
        transaction on the hot path's pool; anything else the SQL way."""
        if change.task is None and only_request(change):
            return await self._request_unit(change)
        if change.task is None or not only_task(change):
            return await super()._commit_unit(change)
        task = change.task
        if change.insert:
            if not await self._inserts([task.id, *_task_params(task, task.version)]):
                raise Lost  # a duplicate id or schedule fire time
            if task.state is TaskState.QUEUED:
                self._wake_nodes()
        elif not await self._saves([task.id, task.version,
                                    *_task_params(task, task.version + 1)]):
            raise Lost
        elif task.state is TaskState.QUEUED:  # requeued: its node may be idle
            self._wake_nodes()
        return []

    async def _request_unit(self, change: Change) -> list[AuditEvent]:
        """An outside request's change: `request_steps`' statements in one transaction,
        in pipeline mode: the writes go out together, a query's row is waited for (the
        audit head's), and each compare-and-set's row count is checked before the commit.
        A round trip each had been most of the change's cost."""
        import psycopg

        steps = request_steps(change, self.sealer, _PG)
        try:
            async with (self._conn() as conn, conn.pipeline() as pipeline,
                        conn.transaction()):
                checks: list[tuple[Any, int]] = []
                result: Any = None
                try:
                    while True:
                        step = steps.send(result)
                        result = None
                        cur = conn.cursor()
                        if isinstance(step, Many):
                            await cur.executemany(step.sql, step.rows)
                            continue
                        await cur.execute(step.sql, step.params)
                        if isinstance(step, One):
                            result = await cur.fetchone()
                        elif step.expect is not None:
                            checks.append((cur, step.expect))
                except StopIteration as done:
                    sealed = list(done.value)
                await pipeline.sync()
                if any(cur.rowcount != expect for cur, expect in checks):
                    raise Lost
                return sealed
        except psycopg.IntegrityError:  # a duplicate id or idempotency key
            raise Lost from None

    async def _insert_rows(self, rows: list[list[Any]]) -> list[bool]:
        """Insert task rows in one statement; which of them went in."""
        inserted = set(await self._returning(_insert_sql(len(rows)), rows))
        went_in = []
        for row in rows:  # two rows of one id (never made by new_id): the first counts
            went_in.append(row[0] in inserted)
            inserted.discard(row[0])
        return went_in

    async def _save_rows(self, rows: list[list[Any]]) -> list[bool]:
        """Update tasks whose version is still the expected one; which of them were."""
        saved = {int(n) for n in await self._returning(_update_sql(len(rows)), rows)}
        return [n in saved for n in range(len(rows))]

    async def _returning(self, sql: str, rows: list[list[Any]]) -> list[Any]:
        """RETURNING's first column of one row statement."""
        import psycopg

        async with self._conn() as conn:
            try:
                cur = await conn.execute(sql, [value for row in rows for value in row])
            except psycopg.errors.DeadlockDetected as exc:
                raise _Tied from exc
            return [r[0] for r in await cur.fetchall()]

    def _wake_nodes(self) -> None:
        """Have idle nodes look at the queue: a NOTIFY soon, shared with other inserts.

        Not in the insert's transaction, measured: PostgreSQL serializes the commits of
        transactions that NOTIFY (one global lock on the notification queue, held through
        the commit's WAL flush), so a NOTIFY per insert made every submission of every
        node wait for the one before it (~38 tasks/s whatever the concurrency, on this
        machine). Sent after the commit, the notification still never announces a row
        that is not there; at most one is on its way, and every insert that committed
        meanwhile is announced by the next one, sent ``notify_gap`` after it: under a
        steady stream of submissions the wake-ups went out back to back otherwise (one
        per round trip, ~0.45 per task in bench/cluster.py), and each one wakes every
        node's listener, its PostgreSQL backend and often a claim that finds nothing. A
        node that dies between its commit and the NOTIFY leaves the task to the other
        nodes' polling (``daemon.poll_interval``).
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
            await asyncio.sleep(self.notify_gap)  # inserts meanwhile share the next one

    # -- claims ---------------------------------------------------------------------------
    async def claim_next(self, node_id: str, lease_until: datetime) -> Task | None:
        """The oldest queued task; consumers asking together share one batch claim."""
        return await self._claims(_Claim(node_id, lease_until))

    async def _claim_rows(self, asks: list[_Claim]) -> list[Task | None]:
        # A batch never claims more tasks than consumers ask (a task claimed ahead of a
        # consumer would hold a lease nobody renews); one statement per node asking.
        by_node: dict[str, list[int]] = {}
        for n, ask in enumerate(asks):
            by_node.setdefault(ask.node_id, []).append(n)
        got: list[Task | None] = [None] * len(asks)
        for node_id, which in by_node.items():
            lease = max(asks[n].lease_until for n in which)
            async with self._conn() as conn:
                cur = await conn.execute(_CLAIM_BATCH, [node_id, len(which), node_id,
                                                        _naive(lease)])
                rows = await cur.fetchall()
            for n, row in zip(which, sorted(rows, key=lambda r: int(r[0])), strict=False):
                got[n] = _task(row)
        return got

    async def claim(self, task_id: str, node_id: str, lease_until: datetime,
                    from_state: TaskState) -> Task | None:
        """Take one given task atomically if it is in ``from_state``."""
        async with self._conn() as conn:
            cur = await conn.execute(_CLAIM_ONE, [node_id, _naive(lease_until), task_id,
                                                  from_state.value])
            row = await cur.fetchone()
        return _task(row) if row else None

    async def renew_lease(self, task_id: str, node_id: str, lease_until: datetime) -> bool:
        """Extend a lease this node still holds."""
        async with self._conn() as conn:
            cur = await conn.execute(_RENEW, [_naive(lease_until), task_id, node_id])
            return bool(cur.rowcount)

    async def get_task(self, task_id: str) -> Task | None:
        """One task by id."""
        async with self._conn() as conn:
            cur = await conn.execute(_GET, [task_id])
            row = await cur.fetchone()
        return _task(row) if row else None

    async def get_approval(self, approval_id: str) -> Approval | None:
        """One approval request, in one prepared statement: a request is read several
        times on its way (asked, looked at, decided, its card updated), and through the
        SQL engine each read cost a connection check and SQLAlchemy's statement work."""
        async with self._conn() as conn:
            cur = await conn.execute(_GET_APPROVAL, [approval_id])
            row = await cur.fetchone()
        if row is None:
            return None
        data, found_id, task_id, expires_at = row
        return read_approval(data, found_id, task_id=task_id, expires_at=_aware(expires_at))

    async def due_outbox(self, now: datetime, *, limit: int = 50) -> list[OutboxItem]:
        """Undelivered items whose time has come, oldest first."""
        async with self._conn() as conn:
            cur = await conn.execute(_DUE_OUTBOX, [_naive(now), limit])
            rows = await cur.fetchall()
        out = []
        for key, surface, kind, data, approval_id, item_id, attempts, next_at, error in rows:
            payload, unreadable = read_payload(data, item_id)
            out.append(OutboxItem(key=key, surface=surface, kind=kind, payload=payload,
                                  approval_id=approval_id, id=item_id, attempts=attempts,
                                  next_at=_aware(next_at), error=error, unreadable=unreadable))
        return out
