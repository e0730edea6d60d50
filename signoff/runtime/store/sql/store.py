"""`TaskStore` on SQLModel/SQLAlchemy: PostgreSQL for teams, and any SQLite database.

This is the plain SQLAlchemy store. A SQLite *file* normally gets `SqliteTaskStore`
instead (see `store/factory.py`), which reuses every method here but runs them on its own
thread and takes a few hot statements past SQLAlchemy; this class is what it specialises,
and what serves PostgreSQL, SQLite in memory and SQLite through other drivers.

Why a sync engine: measured here, SQLAlchemy over aiosqlite is ~10x slower than a sync
engine, because every statement is a round trip to aiosqlite's thread. We run whole
units of work in a small thread pool instead (one thread for SQLite, whose writers are
serialized anyway). Every call of the engine goes through `_run` (the thread) and every
transaction through `_tx`, the two seams `SqliteTaskStore` replaces. Writes on SQLite use
BEGIN IMMEDIATE so that two processes never deadlock upgrading a read lock; claims use an
atomic UPDATE … RETURNING because SQLite silently ignores FOR UPDATE.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import sqlite3
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from signoff.errors import Conflict, StoreError
from signoff.runtime import audit as audit_chain
from signoff.runtime.models import (
    Approval,
    ApprovalStatus,
    AuditEvent,
    Grant,
    Task,
    TaskState,
)
from signoff.runtime.signing import PublicKey, Signer
from signoff.runtime.store.outage import store_error
from signoff.runtime.store.port import (
    CardRecord,
    Change,
    ConsoleSession,
    NodeRecord,
    OutboxItem,
    Page,
    PasskeyChallenge,
    PasskeyRecord,
    PendingRequest,
    PushSubscription,
    UndeliveredCard,
)
from signoff.runtime.store.readers import read_entry, readable
from signoff.runtime.store.sql import counts as task_counts
from signoff.runtime.store.sql import groups
from signoff.runtime.store.sql import keys as key_rows
from signoff.runtime.store.sql import nodes as node_rows
from signoff.runtime.store.sql import passkeys as passkey_rows
from signoff.runtime.store.sql import push as push_rows
from signoff.runtime.store.sql import requests as request_queries
from signoff.runtime.store.sql import sessions as session_rows
from signoff.runtime.store.sql import undelivered as undelivered_rows
from signoff.runtime.store.sql.rows import (
    ACTIVE,
    APPROVAL_COLS,
    approval_from,
    approvals_t,
    audit_t,
    cards_t,
    coalesce_t,
    grant_from,
    grants_from,
    grants_t,
    head_t,
    make_engine,
    outbox_from,
    outbox_t,
    parse_cursor,
    read_engine,
    refusals_t,
    requests_t,
    safe_url,
    task_from,
    tasks_t,
    transcript_t,
)
from signoff.runtime.store.sql.tables import SCHEMA_LOCK
from signoff.runtime.store.sql.writes import Lost, apply_change
from signoff.runtime.transcript import TranscriptEntry

log = logging.getLogger(__name__)
T = TypeVar("T")
STATES_SLICE = 1000  # ids per statement of `approval_states`


class SqlTaskStore:
    """The durable store. ``url`` is a SQLAlchemy URL (sqlite:///… or postgresql+psycopg://…)."""

    # The payload of this store's wake-ups (store/postgres/notify.py); one on PostgreSQL draws its
    # own, and SQLite sends none (subclasses that skip __init__ keep this one).
    wakeup_sender = ""

    def __init__(self, *, url: str, signer: Signer | None = None) -> None:
        self.url = url
        self.sealer = audit_chain.Sealer(signer)
        self.is_sqlite = url.startswith("sqlite")
        self.wakeup_sender = secrets.token_hex(8)  # payload of this store's wake-ups
        try:
            self._write = make_engine(url, immediate=True)
            # Readers of a SQLite file use their own plain-BEGIN engine; an in-memory
            # database exists once per connection, so there it must be the same engine.
            in_memory = self.is_sqlite and sa.engine.make_url(url).database in (None, "",
                                                                                ":memory:")
            self._read = (make_engine(url, immediate=False)
                          if self.is_sqlite and not in_memory else read_engine(self._write))
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {safe_url(url)}: {exc}") from exc
        self._pool = ThreadPoolExecutor(max_workers=1 if self.is_sqlite else 8,
                                        thread_name_prefix="signoff-db")

    # -- plumbing ---------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking database function off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    @contextmanager
    def _tx(self, *, write: bool = True) -> Iterator[Connection]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        engine = self._write if write else self._read
        with self._errors(), engine.begin() as conn:
            yield conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Database failures as `StoreError` naming the database (lost races pass through)."""
        try:
            yield
        except (Lost, sa.exc.IntegrityError):
            raise
        except (sa.exc.DBAPIError, sa.exc.TimeoutError, sqlite3.Error, OSError) as exc:
            raise store_error(exc, safe_url(self.url)) from exc

    async def open(self) -> None:
        """Create tables and the audit head row; fail clearly when unreachable."""
        await self._run(self._open)

    def _open(self) -> None:
        tables = [tasks_t, approvals_t, grants_t, audit_t, head_t, cards_t, outbox_t,
                  requests_t, transcript_t, node_rows.nodes_t, undelivered_rows.undelivered_t,
                  coalesce_t, refusals_t, session_rows.sessions_t, push_rows.push_t,
                  key_rows.keys_t, passkey_rows.passkeys_t, passkey_rows.challenges_t]
        try:
            with self._tx() as conn:
                if not self.is_sqlite:
                    # Nodes started together would both find a table missing and both
                    # create it (DuplicateTable): one creates, the others then see it.
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                                 {"key": SCHEMA_LOCK})
                new_refusals = not sa.inspect(conn).has_table(refusals_t.name)
                SQLModel.metadata.create_all(conn, tables=tables)
                if new_refusals:
                    request_queries.fill_refusals(conn, postgres=not self.is_sqlite)
                # create_all skips a table that exists, with its indexes: an index added
                # since (a database made by an older signoff) is created here.
                for table in tables:
                    for index in table.indexes:
                        index.create(conn, checkfirst=True)
                task_counts.ensure(conn, postgres=not self.is_sqlite)
            with self._tx() as conn:
                if conn.execute(sa.select(head_t.c.id)).first() is None:
                    conn.execute(head_t.insert().values(id=1, count=0, hash=audit_chain.GENESIS))
        except sa.exc.IntegrityError:
            pass  # another node created the head row at the same moment
        except (sa.exc.DBAPIError, sa.exc.TimeoutError, OSError) as exc:
            raise store_error(exc, safe_url(self.url), opening=True) from exc

    async def close(self) -> None:
        """Dispose of the engines and the thread pool."""
        self._write.dispose()
        self._read.dispose()
        self._pool.shutdown(wait=False)

    async def reset(self) -> dict[str, int]:
        """Delete every row; report the counts."""
        return await self._run(self._reset)

    def _reset(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._tx() as conn:
            for name, table in (("tasks", tasks_t), ("approvals", approvals_t),
                                ("grants", grants_t), ("audit events", audit_t),
                                ("cards", cards_t), ("outbox items", outbox_t),
                                ("outside requests", requests_t),
                                ("transcript entries", transcript_t),
                                ("undelivered cards", undelivered_rows.undelivered_t),
                                ("coalesced requests", coalesce_t),
                                ("remembered refusals", refusals_t),
                                ("console sessions", session_rows.sessions_t),
                                ("push subscriptions", push_rows.push_t),
                                ("signing keys", key_rows.keys_t)):
                counts[name] = conn.execute(table.delete()).rowcount or 0
            conn.execute(head_t.update().values(count=0, hash=audit_chain.GENESIS))
        self.sealer.published.clear()  # listed again with the first event they sign
        return counts

    # -- the unit of work ---------------------------------------------------------------
    async def commit(self, change: Change) -> bool:
        """Apply a Change atomically; False when a compare-and-set lost."""
        try:
            sealed = await self._commit_unit(change)
        except (Lost, sa.exc.IntegrityError):
            return False
        if change.task is not None and not change.insert:
            change.task.version += 1
        change.audit[:] = sealed
        self.sealer.committed(sealed)
        return True

    async def _commit_unit(self, change: Change) -> list[AuditEvent]:
        """Write one Change in its own transaction; its audit events, sealed."""
        return await self._run(self._commit, change)

    def _commit(self, ch: Change) -> list[AuditEvent]:
        with self._tx() as conn:
            return apply_change(conn, ch, postgres=not self.is_sqlite, sealer=self.sealer,
                                sender=self.wakeup_sender)

    # -- tasks ---------------------------------------------------------------------------
    async def get_task(self, task_id: str) -> Task | None:
        """One task by id."""
        return await self._run(self._get_task, task_id)

    def _get_task(self, task_id: str) -> Task | None:
        with self._tx(write=False) as conn:
            row = conn.execute(sa.select(tasks_t).where(tasks_t.c.id == task_id)).first()
        return task_from(row) if row else None

    async def list_tasks(self, *, state: TaskState | None = None, limit: int = 50,
                         cursor: str | None = None, schedule: str | None = None) -> Page[Task]:
        """Tasks, newest first, by cursor."""
        return await self._run(self._list_tasks, state, limit, cursor, schedule)

    def _list_tasks(self, state: TaskState | None, limit: int, cursor: str | None,
                    schedule: str | None) -> Page[Task]:
        q = sa.select(tasks_t).order_by(tasks_t.c.seq.desc()).limit(limit + 1)
        if state is not None:
            q = q.where(tasks_t.c.state == state.value)
        if schedule is not None:
            q = q.where(tasks_t.c.schedule == schedule)
        if cursor:
            q = q.where(tasks_t.c.seq < parse_cursor(cursor))
        with self._tx(write=False) as conn:
            rows = conn.execute(q).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return Page([task_from(r) for r in rows], str(rows[-1].seq) if more else None)

    async def count_by_state(self, states: Collection[TaskState] | None = None
                             ) -> dict[str, int]:
        """Tasks per state (only ``states``, when given), from the counts the database
        keeps (sql/counts.py): the same cost at any number of tasks."""
        return await self._run(self._count_by_state, states)

    def _count_by_state(self, states: Collection[TaskState] | None) -> dict[str, int]:
        postgres = not self.is_sqlite
        with self._tx(write=postgres) as conn:  # PostgreSQL folds the deltas first
            return task_counts.read(conn, states, postgres=postgres)

    async def claim_next(self, node_id: str, lease_until: datetime) -> Task | None:
        """Take the oldest queued task atomically."""
        return await self._run(self._claim, None, node_id, lease_until, TaskState.QUEUED)

    async def claim(self, task_id: str, node_id: str, lease_until: datetime,
                    from_state: TaskState) -> Task | None:
        """Take one given task atomically if it is in ``from_state``."""
        return await self._run(self._claim, task_id, node_id, lease_until, from_state)

    def _claim(self, task_id: str | None, node_id: str, lease_until: datetime,
               from_state: TaskState) -> Task | None:
        if task_id is None:
            # A queued task's claimed_by names the only node that may take it.
            mine = sa.or_(tasks_t.c.claimed_by.is_(None), tasks_t.c.claimed_by == node_id)
            pick = (sa.select(tasks_t.c.seq).where(tasks_t.c.state == from_state.value, mine)
                    .order_by(tasks_t.c.seq).limit(1))
            if not self.is_sqlite:
                pick = pick.with_for_update(skip_locked=True)
            target = tasks_t.c.seq == pick.scalar_subquery()
        else:
            target = tasks_t.c.id == task_id
        new_state = sa.case((tasks_t.c.needs_plan, TaskState.PLANNING.value),
                            else_=TaskState.IN_PROGRESS.value)
        stmt = (tasks_t.update().where(target, tasks_t.c.state == from_state.value)
                .values(state=new_state, claimed_by=node_id, lease_until=lease_until,
                        version=tasks_t.c.version + 1)
                .returning(*tasks_t.c))
        with self._tx() as conn:
            row = conn.execute(stmt).first()
        return task_from(row) if row else None

    async def renew_lease(self, task_id: str, node_id: str, lease_until: datetime) -> bool:
        """Extend a lease this node still holds."""
        return await self._run(self._renew, task_id, node_id, lease_until)

    def _renew(self, task_id: str, node_id: str, lease_until: datetime) -> bool:
        with self._tx() as conn:
            done = conn.execute(tasks_t.update().where(tasks_t.c.id == task_id,
                                                       tasks_t.c.claimed_by == node_id)
                                .values(lease_until=lease_until))
            return bool(done.rowcount)

    async def orphans(self, node_id: str | None, now: datetime) -> list[Task]:
        """Active tasks of this node's previous life, or whose lease expired."""
        return await self._run(self._orphans, node_id, now)

    def _orphans(self, node_id: str | None, now: datetime) -> list[Task]:
        stale = [tasks_t.c.lease_until.is_(None), tasks_t.c.lease_until < now]
        if node_id is not None:
            stale.append(tasks_t.c.claimed_by == node_id)
        q = (sa.select(tasks_t).where(tasks_t.c.state.in_(ACTIVE), sa.or_(*stale))
             .order_by(tasks_t.c.seq))
        with self._tx(write=False) as conn:
            return [task_from(r) for r in conn.execute(q)]

    async def transcript(self, task_id: str, *, after: int = -1,
                         limit: int = 500) -> Page[TranscriptEntry]:
        """Transcript entries after a seq, oldest first."""
        entries = await self._run(self._transcript, task_id, after, limit + 1)
        more = len(entries) > limit
        entries = entries[:limit]
        return Page(entries, str(entries[-1].seq) if more else None)

    def _transcript(self, task_id: str, after: int, limit: int) -> list[TranscriptEntry]:
        q = (sa.select(transcript_t.c.data, transcript_t.c.seq)
             .where(transcript_t.c.task_id == task_id, transcript_t.c.seq > after)
             .order_by(transcript_t.c.seq).limit(limit))
        with self._tx(write=False) as conn:
            return [read_entry(r.data, task_id, r.seq) for r in conn.execute(q)]

    # -- approvals -----------------------------------------------------------------------
    async def get_approval(self, approval_id: str) -> Approval | None:
        """One approval request."""
        return await self._run(self._get_approval, approval_id)

    def _get_approval(self, approval_id: str) -> Approval | None:
        with self._tx(write=False) as conn:
            row = conn.execute(sa.select(*APPROVAL_COLS)
                               .where(approvals_t.c.id == approval_id)).first()
        return approval_from(row) if row else None

    async def approval_states(self, ids: Collection[str]) -> dict[str, ApprovalStatus]:
        """The status of each stored request among ``ids`` (one read, however many)."""
        return await self._run(self._approval_states, list(ids))

    def _approval_states(self, ids: list[str]) -> dict[str, ApprovalStatus]:
        found: dict[str, ApprovalStatus] = {}
        with self._tx(write=False) as conn:
            # In slices: SQLite takes at most 32,766 parameters in one statement.
            for start in range(0, len(ids), STATES_SLICE):
                q = (sa.select(approvals_t.c.id, approvals_t.c.status)
                     .where(approvals_t.c.id.in_(ids[start:start + STATES_SLICE])))
                found.update((i, ApprovalStatus(s)) for i, s in conn.execute(q))
        return found

    async def pending_approvals(self, *, limit: int = 50, cursor: str | None = None
                                ) -> Page[Task]:
        """Tasks waiting for a decision, oldest first (each carries its approval)."""
        return await self._run(self._pending, limit, cursor)

    def _pending(self, limit: int, cursor: str | None) -> Page[Task]:
        q = (sa.select(tasks_t).where(tasks_t.c.state == TaskState.WAITING_APPROVAL.value)
             .order_by(tasks_t.c.seq).limit(limit + 1))
        if cursor:
            q = q.where(tasks_t.c.seq > parse_cursor(cursor))
        with self._tx(write=False) as conn:
            rows = conn.execute(q).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(readable(map(task_from, rows)), str(rows[-1].seq) if more else None)

    async def pending_requests(self, *, limit: int = 50, cursor: str | None = None
                               ) -> Page[PendingRequest]:
        """Pending requests of tasks and from outside, oldest first."""
        return await self._run(self._pending_requests, limit, cursor)

    def _pending_requests(self, limit: int, cursor: str | None) -> Page[PendingRequest]:
        with self._tx(write=False) as conn:
            return request_queries.pending(conn, limit, cursor)

    async def find_request(self, idempotency_key: str) -> Approval | None:
        """The outside request stored under an idempotency key."""
        return await self._run(self._find_request, idempotency_key)

    def _find_request(self, idempotency_key: str) -> Approval | None:
        with self._tx(write=False) as conn:
            return request_queries.by_key(conn, idempotency_key)

    async def count_requests(self, policy_id: str, capability: str) -> int:
        """Pending or approved outside requests of a policy_id for a capability."""
        return await self._run(self._count_requests, policy_id, capability)

    def _count_requests(self, policy_id: str, capability: str) -> int:
        with self._tx(write=False) as conn:
            return request_queries.count_live(conn, policy_id, capability)

    async def refused_earlier(self, policy_id: str, key: str,
                              since: datetime) -> Approval | None:
        """The newest person's deny since ``since`` of a request with this refusal key."""
        return await self._run(self._read_with, request_queries.refused, policy_id, key,
                               since)

    async def due_approvals(self, now: datetime) -> list[Approval]:
        """Pending approvals past their expiry."""
        return await self._run(self._due_approvals, now)

    async def held_approvals(self) -> list[Approval]:
        """Requests in their hold, soonest release first (few: a hold lasts seconds)."""
        return await self._run(self._held_approvals)

    def _held_approvals(self) -> list[Approval]:
        q = sa.select(*APPROVAL_COLS).where(
            approvals_t.c.status == ApprovalStatus.HELD.value)
        with self._tx(write=False) as conn:
            held = readable(approval_from(r) for r in conn.execute(q))
        return sorted(held, key=lambda a: (a.hold_until or a.requested_at))

    def _due_approvals(self, now: datetime) -> list[Approval]:
        q = sa.select(*APPROVAL_COLS).where(
            approvals_t.c.status == ApprovalStatus.PENDING.value, approvals_t.c.expires_at <= now)
        with self._tx(write=False) as conn:
            # Stand-ins included: the sweep expires them for good.
            return [approval_from(r) for r in conn.execute(q)]

    async def coalesce_leader(self, group_key: str) -> Approval | None:
        """The pending request of a group of identical ones that has the card."""
        return await self._run(self._read_with, groups.leader, group_key)

    async def coalesced(self, leader_id: str) -> list[Approval]:
        """Requests that joined ``leader_id``'s card, any status, oldest first."""
        return await self._run(self._read_with, groups.members, leader_id)

    async def coalesce_strays(self) -> list[Approval]:
        """Pending requests that joined a card whose own request is decided."""
        return await self._run(self._read_with, groups.strays)

    def _read_with(self, fn: Callable[..., T], *args: Any) -> T:
        with self._tx(write=False) as conn:
            return fn(conn, *args)

    # -- grants --------------------------------------------------------------------------
    async def grant_candidates(self, key: str) -> list[Grant]:
        """Unrevoked grants under ``key``, oldest first (the key column is indexed)."""
        return await self._run(self._grant_candidates, key)

    def _grant_candidates(self, key: str) -> list[Grant]:
        q = (sa.select(grants_t).where(grants_t.c.key == key, grants_t.c.revoked.is_(False))
             .order_by(grants_t.c.seq))
        with self._tx(write=False) as conn:
            return grants_from(conn.execute(q))

    async def list_grants(self, *, include_revoked: bool = False) -> list[Grant]:
        """Every grant (live ones only unless asked)."""
        return await self._run(self._list_grants, include_revoked)

    def _list_grants(self, include_revoked: bool) -> list[Grant]:
        q = sa.select(grants_t).order_by(grants_t.c.seq)
        if not include_revoked:
            q = q.where(grants_t.c.revoked.is_(False))
        with self._tx(write=False) as conn:
            return grants_from(conn.execute(q))

    async def get_grant(self, grant_id: str) -> Grant | None:
        """One grant by id."""
        return await self._run(self._get_grant, grant_id)

    def _get_grant(self, grant_id: str) -> Grant | None:
        with self._tx(write=False) as conn:
            row = conn.execute(sa.select(grants_t).where(grants_t.c.id == grant_id)).first()
        return grant_from(row) if row else None

    # -- audit ---------------------------------------------------------------------------
    async def audit_events(self, *, task_id: str | None = None, limit: int = 100,
                           cursor: str | None = None) -> Page[AuditEvent]:
        """Audit events in chain order, optionally for one task."""
        return await self._run(self._audit_events, task_id, limit, cursor)

    def _audit_events(self, task_id: str | None, limit: int, cursor: str | None
                      ) -> Page[AuditEvent]:
        q = sa.select(audit_t).order_by(audit_t.c.id).limit(limit + 1)
        if task_id is not None:
            q = q.where(audit_t.c.task_id == task_id)
        if cursor:
            q = q.where(audit_t.c.id > parse_cursor(cursor))
        with self._tx(write=False) as conn:
            rows = conn.execute(q).all()
        more = len(rows) > limit
        rows = rows[:limit]
        items = [audit_chain.from_row(r.id, r.data) for r in rows]
        return Page(items, str(rows[-1].id) if more else None)

    async def audit_chain(self, *, after: int = 0, limit: int = 10_000) -> list[AuditEvent]:
        """Raw events by id, for verification (the row id is authoritative)."""
        return await self._run(self._audit_chain, after, limit)

    def _audit_chain(self, after: int, limit: int) -> list[AuditEvent]:
        q = sa.select(audit_t).where(audit_t.c.id > after).order_by(audit_t.c.id).limit(limit)
        with self._tx(write=False) as conn:
            rows = conn.execute(q).all()
        return [audit_chain.from_row(r.id, r.data) for r in rows]

    async def audit_head(self) -> tuple[int, str]:
        """(count, head hash)."""
        return await self._run(self._audit_head)

    def _audit_head(self) -> tuple[int, str]:
        with self._tx(write=False) as conn:
            row = conn.execute(sa.select(head_t.c.count, head_t.c.hash)
                               .where(head_t.c.id == 1)).first()
        return (int(row[0]), str(row[1])) if row else (0, audit_chain.GENESIS)

    # -- cards and outbox ---------------------------------------------------------------
    async def save_card(self, record: CardRecord) -> None:
        """Remember a posted card (idempotent per approval and surface)."""
        await self._run(self._save_card, record)

    def _save_card(self, r: CardRecord) -> None:
        dialect = postgresql if not self.is_sqlite else sqlite
        with self._tx() as conn:
            conn.execute(dialect.insert(cards_t).values(
                approval_id=r.approval_id, surface=r.surface, channel=r.channel,
                message_id=r.message_id).on_conflict_do_nothing())

    async def cards(self, approval_id: str) -> list[CardRecord]:
        """Posted copies of an approval's card."""
        return await self._run(self._cards, approval_id)

    def _cards(self, approval_id: str) -> list[CardRecord]:
        q = sa.select(cards_t).where(cards_t.c.approval_id == approval_id)
        with self._tx(write=False) as conn:
            return [CardRecord(r.approval_id, r.surface, r.channel, r.message_id)
                    for r in conn.execute(q)]

    async def due_outbox(self, now: datetime, *, limit: int = 50) -> list[OutboxItem]:
        """Undelivered items whose time has come, oldest first."""
        return await self._run(self._due_outbox, now, limit)

    def _due_outbox(self, now: datetime, limit: int) -> list[OutboxItem]:
        q = (sa.select(outbox_t).where(outbox_t.c.done.is_(False), outbox_t.c.next_at <= now)
             .order_by(outbox_t.c.id).limit(limit))
        with self._tx(write=False) as conn:
            return [outbox_from(r) for r in conn.execute(q)]

    async def outbox_done(self, item_id: int, now: datetime) -> None:
        """Mark an item delivered."""
        await self._run(self._outbox_update, item_id, {"done": True, "error": None})

    async def outbox_retry(self, item_id: int, *, next_at: datetime, error: str,
                           give_up: bool = False) -> None:
        """Reschedule a failed delivery (or stop trying)."""
        await self._run(self._outbox_update, item_id, {
            "next_at": next_at, "error": error[:500], "done": give_up,
            "attempts": outbox_t.c.attempts + 1})

    def _outbox_update(self, item_id: int, values: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(outbox_t.update().where(outbox_t.c.id == item_id).values(**values))

    # -- undelivered cards (see sql/undelivered.py) -------------------------------------
    async def mark_undelivered(self, card: UndeliveredCard) -> None:
        """Remember a card given up on a surface (the first mark stays)."""
        await self._run(self._mark_undelivered, card)

    def _mark_undelivered(self, card: UndeliveredCard) -> None:
        with self._tx() as conn:
            undelivered_rows.mark(conn, card, postgres=not self.is_sqlite)

    async def undelivered(self, *, limit: int = 100) -> list[UndeliveredCard]:
        """Cards marked undelivered, oldest first."""
        return await self._run(self._undelivered, limit)

    def _undelivered(self, limit: int) -> list[UndeliveredCard]:
        with self._tx(write=False) as conn:
            return undelivered_rows.listed(conn, limit)

    async def forget_undelivered(self, approval_id: str, surface: str) -> None:
        """Drop one card's mark."""
        await self._run(self._forget_undelivered, approval_id, surface)

    def _forget_undelivered(self, approval_id: str, surface: str) -> None:
        with self._tx() as conn:
            undelivered_rows.forget(conn, approval_id, surface)

    # -- console sessions (see sql/sessions.py) -----------------------------------------
    async def signing_keys(self) -> list[PublicKey]:
        """Every listed public key, oldest first."""
        return await self._run(self._in_read, key_rows.listed)

    def _in_read(self, fn: Callable[[Connection], T]) -> T:
        with self._tx(write=False) as conn:
            return fn(conn)

    async def publish_key(self, key: PublicKey) -> None:
        """List a public key (kept as it is when listed already)."""
        await self._run(self._in_write, functools.partial(
            key_rows.publish, keys=[key], postgres=not self.is_sqlite))

    def _in_write(self, fn: Callable[[Connection], T]) -> T:
        with self._tx() as conn:
            return fn(conn)

    async def retire_key(self, kid: str, at: datetime) -> bool:
        """Mark a listed key retired."""
        return await self._run(self._in_write, functools.partial(key_rows.retire, kid=kid,
                                                                 at=at))

    async def open_session(self, session: ConsoleSession, *, now: datetime) -> None:
        """Store a console session; forget the expired ones."""
        await self._run(self._open_session, session, now)

    def _open_session(self, session: ConsoleSession, now: datetime) -> None:
        with self._tx() as conn:
            session_rows.open_session(conn, session, now)

    async def console_session(self, session_id: str) -> ConsoleSession | None:
        """A stored console session."""
        return await self._run(self._console_session, session_id)

    def _console_session(self, session_id: str) -> ConsoleSession | None:
        with self._tx(write=False) as conn:
            return session_rows.get(conn, session_id)

    async def end_session(self, session_id: str) -> None:
        """Forget a console session."""
        await self._run(self._end_session, session_id)

    def _end_session(self, session_id: str) -> None:
        with self._tx() as conn:
            session_rows.end(conn, session_id)

    # -- push subscriptions (see sql/push.py) -------------------------------------------
    async def add_push_subscription(self, sub: PushSubscription) -> PushSubscription:
        """Keep a push subscription, replacing one of the same endpoint."""
        await self._run(self._add_push, sub)
        return sub

    def _add_push(self, sub: PushSubscription) -> None:
        with self._tx() as conn:
            push_rows.add(conn, sub)

    async def push_subscriptions(self, holder: str | None = None) -> list[PushSubscription]:
        """``holder``'s push subscriptions (None: all), oldest first."""
        return await self._run(self._push_subscriptions, holder)

    def _push_subscriptions(self, holder: str | None) -> list[PushSubscription]:
        with self._tx(write=False) as conn:
            return push_rows.listed(conn, holder)

    async def remove_push_subscription(self, sub_id: str, *, holder: str | None = None
                                       ) -> bool:
        """Forget one push subscription (``holder``'s only, when given)."""
        return await self._run(self._remove_push, sub_id, holder)

    def _remove_push(self, sub_id: str, holder: str | None) -> bool:
        with self._tx() as conn:
            return push_rows.remove(conn, sub_id, holder)

    # -- passkeys (see sql/passkeys.py) --------------------------------------------------
    def _in_tx(self, fn: Callable[..., T], write: bool, *args: Any) -> T:
        with self._tx(write=write) as conn:
            return fn(conn, *args)

    async def add_passkey(self, passkey: PasskeyRecord) -> None:
        """Store a passkey; `Conflict` when its credential is registered already."""
        try:
            await self._run(self._in_tx, passkey_rows.add, True, passkey)
        except sa.exc.IntegrityError as exc:
            raise Conflict(f"passkey credential {passkey.credential_id} is registered") from exc

    async def passkeys(self) -> list[PasskeyRecord]:
        """Every passkey, oldest first."""
        return await self._run(self._in_tx, passkey_rows.listed, False)

    async def passkey(self, credential_id: str) -> PasskeyRecord | None:
        """One passkey by credential id."""
        return await self._run(self._in_tx, passkey_rows.by_credential, False, credential_id)

    async def revoke_passkey(self, passkey_id: str, *, at: datetime) -> bool:
        """Revoke a passkey."""
        return await self._run(self._in_tx, passkey_rows.revoke, True, passkey_id, at)

    async def passkey_signed(self, credential_id: str, sign_count: int) -> bool:
        """Move the signature counter forward (compare-and-set, see the port)."""
        return await self._run(self._in_tx, passkey_rows.signed, True, credential_id,
                               sign_count)

    async def add_passkey_challenge(self, challenge: PasskeyChallenge, *,
                                    now: datetime) -> None:
        """Store a challenge; forget the expired."""
        await self._run(self._in_tx, passkey_rows.add_challenge, True, challenge, now)

    async def passkey_challenge(self, challenge: str) -> PasskeyChallenge | None:
        """One challenge."""
        return await self._run(self._in_tx, passkey_rows.challenge, False, challenge)

    async def use_passkey_challenge(self, challenge: str, *, at: datetime) -> bool:
        """Use a challenge once (compare-and-set)."""
        return await self._run(self._in_tx, passkey_rows.use, True, challenge, at)

    # -- node registry (see sql/nodes.py) ------------------------------------------------
    async def beat(self, node: NodeRecord, *, forget_before: datetime) -> None:
        """Refresh a node's registry row; forget the long dead."""
        await self._run(self._beat, node, forget_before)

    def _beat(self, node: NodeRecord, forget_before: datetime) -> None:
        with self._tx() as conn:
            node_rows.beat(conn, node, forget_before=forget_before, postgres=not self.is_sqlite)

    async def leave(self, node_id: str) -> None:
        """Drop a node's registry row."""
        await self._run(self._leave, node_id)

    def _leave(self, node_id: str) -> None:
        with self._tx() as conn:
            node_rows.leave(conn, node_id)

    async def live_nodes(self, now: datetime) -> list[NodeRecord]:
        """Registry rows still live at ``now``."""
        return await self._run(self._live_nodes, now)

    def _live_nodes(self, now: datetime) -> list[NodeRecord]:
        with self._tx(write=False) as conn:
            return node_rows.live(conn, now)
