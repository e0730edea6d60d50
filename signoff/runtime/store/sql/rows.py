"""Rows and engines of the SQL store: table handles, row <-> model conversion, and the
SQLAlchemy engine set up for SQLite (WAL, BEGIN IMMEDIATE) or PostgreSQL.

Kept apart from `sqlstore` so that the store reads as its operations only.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from signoff.errors import StoreError
from signoff.runtime.models import Grant, Task, TaskState
from signoff.runtime.store.port import Change, OutboxItem
from signoff.runtime.store.sql.tables import (
    ApprovalRow,
    AuditHeadRow,
    AuditRow,
    CardRow,
    GrantRow,
    OutboxRow,
    RequestRow,
    TaskRow,
)

tasks_t = TaskRow.__table__  # type: ignore[attr-defined]
approvals_t = ApprovalRow.__table__  # type: ignore[attr-defined]
grants_t = GrantRow.__table__  # type: ignore[attr-defined]
audit_t = AuditRow.__table__  # type: ignore[attr-defined]
head_t = AuditHeadRow.__table__  # type: ignore[attr-defined]
cards_t = CardRow.__table__  # type: ignore[attr-defined]
outbox_t = OutboxRow.__table__  # type: ignore[attr-defined]
requests_t = RequestRow.__table__  # type: ignore[attr-defined]

# States in which a task is held by a node (what recovery looks at).
ACTIVE = (TaskState.PLANNING.value, TaskState.IN_PROGRESS.value)


def make_engine(url: str, *, immediate: bool) -> Engine:
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
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
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def only_task(ch: Change) -> bool:
    """True when a Change writes nothing but its task (the per-task hot path)."""
    return (ch.approval is None and ch.expect_state is None and not ch.grants
            and not ch.grant_revokes and not ch.audit and not ch.outbox
            and not ch.outbox_done and ch.outcome_for is None)


def only_request(ch: Change) -> bool:
    """True when a Change is about an outside request only (stored, decided, expired or
    its outcome recorded): no task, no grant revocations, no delivered jobs."""
    return (ch.approval is not None and ch.approval.task_id is None and ch.task is None
            and not ch.grant_revokes and not ch.outbox_done)


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
    task = Task.model_validate_json(row.data)
    # The columns are authoritative for what claims and CAS change without rewriting data.
    task.state = TaskState(row.state)
    task.version = row.version
    task.claimed_by = row.claimed_by
    task.lease_until = row.lease_until
    return task


def grant_cols(g: Grant) -> dict[str, Any]:
    return {"id": g.id, "key": g.key, "policy_id": g.policy_id, "task_id": g.task_id,
            "scope": g.scope.value, "max_calls": g.max_calls, "used": g.used,
            "revoked": g.revoked_at is not None, "data": g.model_dump_json()}


def grant_from(row: Any) -> Grant:
    grant = Grant.model_validate_json(row.data)
    grant.used = row.used
    return grant


def outbox_from(row: Any) -> OutboxItem:
    return OutboxItem(key=row.key, surface=row.surface, kind=row.kind,
                      payload=json.loads(row.payload), approval_id=row.approval_id, id=row.id,
                      attempts=row.attempts, next_at=row.next_at, error=row.error)
