"""The read side of outside requests in the SQL store: pending requests of every kind,
a request by idempotency key, and what a budget counts.

Plain functions over a connection, like `writes`, so that the store reads as its
operations only.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from signoff.runtime.models import Approval, ApprovalStatus, Task
from signoff.runtime.store.port import Page, PendingRequest
from signoff.runtime.store.readers import readable
from signoff.runtime.store.sql.rows import (
    APPROVAL_COLS,
    approval_from,
    approvals_t,
    parse_cursor,
    refusals_t,
    requests_t,
    task_from,
    tasks_t,
)
from signoff.runtime.store.sql.writes import write_refusal


def pending(conn: Connection, limit: int, cursor: str | None) -> Page[PendingRequest]:
    """Pending requests, oldest first, each with its task (None for outside ones)."""
    q = (sa.select(approvals_t.c.seq, *APPROVAL_COLS)
         .where(approvals_t.c.status == ApprovalStatus.PENDING.value)
         .order_by(approvals_t.c.seq).limit(limit + 1))
    if cursor:
        q = q.where(approvals_t.c.seq > parse_cursor(cursor))
    rows = conn.execute(q).all()
    more = len(rows) > limit
    rows = rows[:limit]
    approvals = readable(approval_from(r) for r in rows)
    wanted = [a.task_id for a in approvals if a.task_id]
    tasks: dict[str, Task] = {}
    if wanted:
        found = conn.execute(sa.select(tasks_t).where(tasks_t.c.id.in_(wanted)))
        tasks = {t.id: t for t in readable(map(task_from, found))}
    items = []
    for ap in approvals:
        task = tasks.get(ap.task_id) if ap.task_id else None
        if ap.task_id and (task is None or task.approval is None or task.approval.id != ap.id):
            continue  # a stale request of a task that moved on
        items.append(PendingRequest(ap, task))
    return Page(items, str(rows[-1].seq) if more else None)


def by_key(conn: Connection, idempotency_key: str) -> Approval | None:
    """The outside request stored under an idempotency key."""
    q = (sa.select(*APPROVAL_COLS)
         .join(requests_t, requests_t.c.approval_id == approvals_t.c.id)
         .where(requests_t.c.idempotency_key == idempotency_key))
    row = conn.execute(q).first()
    return approval_from(row) if row else None


def refused(conn: Connection, policy_id: str, key: str, since: datetime) -> Approval | None:
    """The newest person's deny, decided at ``since`` or later, of an outside request of
    ``policy_id`` with this refusal key: one probe of the refusals index."""
    q = (sa.select(*APPROVAL_COLS)
         .select_from(refusals_t.join(approvals_t, approvals_t.c.id == refusals_t.c.approval_id))
         .where(refusals_t.c.policy_id == policy_id, refusals_t.c.refusal_key == key,
                refusals_t.c.decided_at >= since)
         .order_by(refusals_t.c.decided_at.desc()).limit(1))
    row = conn.execute(q).first()
    found = approval_from(row) if row else None
    return found if found is not None and found.unreadable is None else None


def fill_refusals(conn: Connection, *, postgres: bool) -> None:
    """The refusals of a database made before they had a table of their own: every
    person's deny of an outside request, read once when the table is created."""
    q = (sa.select(*APPROVAL_COLS)
         .join(requests_t, requests_t.c.approval_id == approvals_t.c.id)
         .where(approvals_t.c.status == ApprovalStatus.DENIED.value))
    for ap in readable(approval_from(r) for r in conn.execute(q)):
        write_refusal(conn, ap, postgres=postgres)


def count_live(conn: Connection, policy_id: str, capability: str) -> int:
    """Pending or approved outside requests of a policy_id for a capability."""
    live = (ApprovalStatus.PENDING.value, ApprovalStatus.HELD.value,
            ApprovalStatus.APPROVED.value)
    q = (sa.select(sa.func.count())
         .select_from(requests_t.join(approvals_t, approvals_t.c.id == requests_t.c.approval_id))
         .where(requests_t.c.policy_id == policy_id, requests_t.c.capability == capability,
                approvals_t.c.status.in_(live)))
    return int(conn.execute(q).scalar_one())
