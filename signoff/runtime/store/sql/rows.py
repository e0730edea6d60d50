"""Rows and engines of the SQL store: table handles, row <-> model conversion, and the
SQLAlchemy engine set up for SQLite (WAL, BEGIN IMMEDIATE) or PostgreSQL.

Kept apart from `store.py` so that the store reads as its operations only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from signoff.errors import StoreError
from signoff.runtime.models import Approval, Grant, Task, TaskState
from signoff.runtime.store.port import Change, OutboxItem
from signoff.runtime.store.readers import read_approval, read_grant, read_payload, read_task
from signoff.runtime.store.sql.tables import (
    ApprovalRow,
    AuditHeadRow,
    AuditRow,
    CardRow,
    CoalesceRow,
    GrantRow,
    OutboxRow,
    RefusalRow,
    RequestRow,
    TaskRow,
    TranscriptRow,
)

tasks_t = TaskRow.__table__  # type: ignore[attr-defined]
approvals_t = ApprovalRow.__table__  # type: ignore[attr-defined]
grants_t = GrantRow.__table__  # type: ignore[attr-defined]
audit_t = AuditRow.__table__  # type: ignore[attr-defined]
head_t = AuditHeadRow.__table__  # type: ignore[attr-defined]
cards_t = CardRow.__table__  # type: ignore[attr-defined]
outbox_t = OutboxRow.__table__  # type: ignore[attr-defined]
requests_t = RequestRow.__table__  # type: ignore[attr-defined]
refusals_t = RefusalRow.__table__  # type: ignore[attr-defined]
transcript_t = TranscriptRow.__table__  # type: ignore[attr-defined]
coalesce_t = CoalesceRow.__table__  # type: ignore[attr-defined]

# What `approval_from` reads of an approvals row.
APPROVAL_COLS = (approvals_t.c.id, approvals_t.c.task_id, approvals_t.c.expires_at,
                 approvals_t.c.data)

# States in which a task is held by a node (what recovery looks at).
ACTIVE = (TaskState.PLANNING.value, TaskState.IN_PROGRESS.value)


# Every PostgreSQL session of the store: no transaction keeps a shared row (the audit
# chain's head, a task) locked across a pause of its node — a frozen or stalled holder's
# transaction is ended by the server after IDLE_IN_TRANSACTION — and a waiter for a lock
# gives up after LOCK_TIMEOUT (a StoreUnavailable: retried, or a 503 to try again)
# rather than hanging behind it.
LOCK_TIMEOUT = "10s"
IDLE_IN_TRANSACTION = "15s"
PG_SESSION_OPTIONS = (f"-c lock_timeout={LOCK_TIMEOUT} "
                      f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION}")


# SQLite's page cache per connection, in KiB (a negative cache_size): the default 2 MiB
# holds little of a database with 100,000 pending requests, and every decision and listing
# then paid for page reads (bench/pending.py). 16 MiB per connection stays well within
# the memory target.
CACHE_KIB = -16_000


def read_engine(engine: Engine) -> Engine:
    """The engine the store reads with: ``engine`` itself on SQLite, and on PostgreSQL the
    same pool in autocommit. A read then costs its statement only, without a BEGIN and a
    COMMIT round trip each (three per read: a decision made some twenty of them). Nothing
    is lost: under PostgreSQL's READ COMMITTED each statement sees its own snapshot
    anyway, inside a transaction or not."""
    if engine.dialect.name == "sqlite":
        return engine
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def make_engine(url: str, *, immediate: bool) -> Engine:
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10,
                                connect_args={"options": PG_SESSION_OPTIONS})
    engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide how transactions start (see below).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA cache_size={CACHE_KIB}")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


# The fields of a Change other than those a plain task insert or update is made of.
_NOT_TASK = tuple(f.name for f in dataclasses.fields(Change)
                  if f.name not in ("at", "task", "insert"))


def only_task(ch: Change) -> bool:
    """True when a Change writes nothing but its task (the per-task hot path).

    Every other field must be unset (None, empty, False): a field added to `Change` later
    is then never silently skipped by a hot path that does not know it.
    """
    return ch.task is not None and not any(getattr(ch, name) for name in _NOT_TASK)


def only_turn(ch: Change) -> bool:
    """True when a Change appends transcript entries and writes nothing else but, perhaps,
    its task (an agent turn: the per-turn hot path)."""
    return bool(ch.transcript) and not any(
        getattr(ch, name) for name in _NOT_TASK if name != "transcript")


# What a change of an outside request (stored, decided, expired, its outcome recorded)
# may carry; any other field set sends it down the general path.
_REQUEST_FIELDS = frozenset({"at", "approval", "approval_expect", "insert_approval",
                             "outcome_for", "grants", "audit", "outbox"})
_NOT_REQUEST = tuple(f.name for f in dataclasses.fields(Change)
                     if f.name not in _REQUEST_FIELDS)


def only_request(ch: Change) -> bool:
    """True when a Change is about one outside request only (no task): the hot path of
    POST /v1/approvals and of its decision."""
    return (ch.approval is not None and ch.approval.task_id is None
            and not any(getattr(ch, name) for name in _NOT_REQUEST))


def dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)


def parse_cursor(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise StoreError(f"invalid cursor {text!r}") from None


def safe_url(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<invalid url>"


def task_cols(task: Task, version: int) -> dict[str, Any]:
    return {"id": task.id, "state": task.state.value, "schedule": task.schedule,
            "fire_time": task.fire_time, "claimed_by": task.claimed_by,
            "lease_until": task.lease_until, "version": version,
            "needs_plan": task.steps is None, "data": task.model_dump_json()}


def task_from(row: Any) -> Task:
    task = read_task(row.data, row.id)
    # The columns are authoritative for what claims and CAS change without rewriting data
    # (a stand-in stays FAILED: that is what it is until the engine sets it aside).
    if task.unreadable is None:
        task.state = TaskState(row.state)
    task.version = row.version
    task.claimed_by = row.claimed_by
    task.lease_until = row.lease_until
    return task


def approval_from(row: Any) -> Approval:
    """An approvals row (``id``, ``task_id``, ``expires_at``, ``data``) as its request."""
    return read_approval(row.data, row.id, task_id=row.task_id, expires_at=row.expires_at)


def grant_cols(g: Grant) -> dict[str, Any]:
    return {"id": g.id, "key": g.key, "policy_id": g.policy_id, "task_id": g.task_id,
            "scope": g.scope.value, "max_calls": g.max_calls, "used": g.used,
            "revoked": g.revoked_at is not None, "data": g.model_dump_json()}


def grant_from(row: Any) -> Grant | None:
    """A grants row as its grant; None when it cannot be read (it then grants nothing)."""
    grant = read_grant(row.data, row.id)
    if grant is not None:
        grant.used = row.used
    return grant


def grants_from(rows: Iterable[Any]) -> list[Grant]:
    """The readable grants of ``rows``, in their order."""
    return [g for g in map(grant_from, rows) if g is not None]


def outbox_from(row: Any) -> OutboxItem:
    payload, unreadable = read_payload(row.payload, row.id)
    return OutboxItem(key=row.key, surface=row.surface, kind=row.kind, payload=payload,
                      approval_id=row.approval_id, id=row.id, attempts=row.attempts,
                      next_at=row.next_at, error=row.error, unreadable=unreadable)
