"""The read side of outside requests in the SQL store: pending requests of every kind,
a request by idempotency key, and what a budget counts.

Plain functions over a connection, like `writes`, so that the store reads as its
operations only.
"""

from __future__ import annotations

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
    requests_t,
    task_from,
    tasks_t,
)


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


def denied(conn: Connection, policy_id: str, capability: str, limit: int) -> list[Approval]:
    """The latest denied outside requests of a policy_id for a capability, newest first."""
    q = (sa.select(approvals_t.c.data)
         .select_from(requests_t.join(approvals_t, approvals_t.c.id == requests_t.c.approval_id))
         .where(requests_t.c.policy_id == policy_id, requests_t.c.capability == capability,
                approvals_t.c.status == ApprovalStatus.DENIED.value)
         .order_by(approvals_t.c.seq.desc()).limit(limit))
    return [Approval.model_validate_json(r.data) for r in conn.execute(q)]


def count_live(conn: Connection, policy_id: str, capability: str) -> int:
    """Pending or approved outside requests of a policy_id for a capability."""
    live = (ApprovalStatus.PENDING.value, ApprovalStatus.HELD.value,
            ApprovalStatus.APPROVED.value)
    q = (sa.select(sa.func.count())
         .select_from(requests_t.join(approvals_t, approvals_t.c.id == requests_t.c.approval_id))
         .where(requests_t.c.policy_id == policy_id, requests_t.c.capability == capability,
                approvals_t.c.status.in_(live)))
    return int(conn.execute(q).scalar_one())
