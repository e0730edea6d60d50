"""The write side of the SQL store: one `Change` applied inside one transaction.

Every compare-and-set that loses raises `Lost`, which rolls the whole unit of work back.
Audit events are sealed into the chain under a lock on its head row (FOR UPDATE on
PostgreSQL; SQLite's BEGIN IMMEDIATE already serializes writers).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from signoff.runtime import audit as audit_chain
from signoff.runtime.denials import remembered_refusal
from signoff.runtime.models import (
    Approval,
    ApprovalStatus,
    AuditEvent,
    Task,
    TaskState,
)
from signoff.runtime.store.port import Change, OutboxItem
from signoff.runtime.store.readers import read_grant
from signoff.runtime.store.sql import keys as signing_keys
from signoff.runtime.store.sql.groups import write_group
from signoff.runtime.store.sql.rows import (
    APPROVAL_COLS,
    approval_from,
    approvals_t,
    audit_t,
    dumps,
    grant_cols,
    grants_t,
    head_t,
    outbox_t,
    refusals_t,
    requests_t,
    task_cols,
    tasks_t,
    transcript_t,
)

# The wake-up a task insert sends on PostgreSQL, in its own transaction; the nodes listen
# for it in `store/postgres/notify.py`. It is here because this store sends it too.
CHANNEL = "signoff_tasks"
NOTIFY = sa.text("SELECT pg_notify(:channel, :sender)")  # params: CHANNEL, wakeup_sender


class Lost(Exception):
    """A compare-and-set lost inside a unit of work (rolls it back)."""


def apply_change(conn: Connection, ch: Change, *, postgres: bool, sealer: audit_chain.Sealer,
                 sender: str = "") -> list[AuditEvent]:
    """Write everything a Change holds; return its audit events, sealed. ``sender`` is
    the payload of the wake-up a queued task's insert sends on PostgreSQL
    (store/postgres/notify.py)."""
    if ch.approval is not None:
        if ch.approval_votes is not None:
            check_votes(conn, ch.approval.id, ch.approval_votes, postgres=postgres)
        write_approval(conn, ch.approval, ch.approval_expect, insert=ch.insert_approval)
        write_group(conn, ch.approval, postgres=postgres)
        write_refusal(conn, ch.approval, postgres=postgres)
    if ch.outcome_for is not None:
        record_outcome(conn, ch.outcome_for)
    if ch.task is not None:
        write_task(conn, ch.task, insert=ch.insert, expect_state=ch.expect_state)
        if postgres and ch.task.state is TaskState.QUEUED:
            # Wakes idle nodes when this commits (see store/postgres/notify.py): a new
            # task, or one requeued (after a crash, or for the node whose work dir it used).
            conn.execute(NOTIFY, {"channel": CHANNEL, "sender": sender})
    for grant in ch.grants:
        conn.execute(grants_t.insert().values(**grant_cols(grant)))
    for grant_id in ch.grant_revokes:
        revoke_grant(conn, grant_id, at=ch.at)
    for item in ch.outbox:
        insert_outbox(conn, item, postgres=postgres, at=ch.at)
    if ch.outbox_done:
        conn.execute(outbox_t.update().where(outbox_t.c.id.in_(ch.outbox_done))
                     .values(done=True, error=None))
    if ch.transcript:
        conn.execute(transcript_t.insert(), transcript_rows(ch))
    return (append_audit(conn, ch.audit, at=ch.at, sealer=sealer, postgres=postgres)
            if ch.audit else [])


def transcript_rows(ch: Change) -> list[dict[str, object]]:
    """The rows of a change's transcript entries, each stamped (if not yet) with its time."""
    rows: list[dict[str, object]] = []
    for entry in ch.transcript:
        entry.at = entry.at or ch.at
        rows.append({"task_id": entry.task_id, "seq": entry.seq, "role": entry.role,
                     "at": entry.at, "data": entry.model_dump_json()})
    return rows


def request_cols(ap: Approval) -> dict[str, object]:
    """The ``requests`` row of an outside request."""
    return {"approval_id": ap.id, "idempotency_key": ap.idempotency_key,
            "policy_id": ap.policy_id or "", "capability": ap.action.capability or ""}


def write_refusal(conn: Connection, ap: Approval, *, postgres: bool) -> None:
    """Remember a person's deny of an outside request under its refusal key (once)."""
    key = remembered_refusal(ap)
    if key is None:
        return
    dialect = postgresql if postgres else sqlite
    conn.execute(dialect.insert(refusals_t).values(
        approval_id=ap.id, policy_id=ap.policy_id or "", refusal_key=key,
        decided_at=ap.decided_at).on_conflict_do_nothing(index_elements=["approval_id"]))


def record_outcome(conn: Connection, approval_id: str) -> None:
    """Mark an outside request's outcome as recorded, unless it already was (`Lost`)."""
    res = conn.execute(requests_t.update()
                       .where(requests_t.c.approval_id == approval_id,
                              requests_t.c.reported.is_(False))
                       .values(reported=True))
    if res.rowcount != 1:
        raise Lost


def check_votes(conn: Connection, approval_id: str, votes: int, *, postgres: bool) -> None:
    """Lose unless the stored request holds exactly ``votes`` quorum approvals.

    The count lives in the JSON of the row, so it is read under a row lock (FOR UPDATE on
    PostgreSQL: a racing writer waits and then reads the committed row; SQLite's BEGIN
    IMMEDIATE already serializes writers) and compared here, in the same transaction.
    """
    q = sa.select(*APPROVAL_COLS).where(approvals_t.c.id == approval_id)
    if postgres:
        q = q.with_for_update()
    row = conn.execute(q).first()
    if row is None or len(approval_from(row).votes) != votes:
        raise Lost


def write_approval(conn: Connection, ap: Approval, expect: ApprovalStatus | None, *,
                   insert: bool = False) -> None:
    """Insert or update an approval; with ``expect``, only if its status still is that.
    An outside request also gets its ``requests`` row when inserted."""
    cols = {"status": ap.status.value, "expires_at": ap.expires_at, "data": ap.model_dump_json()}
    if insert:
        conn.execute(approvals_t.insert().values(id=ap.id, task_id=ap.task_id or "", **cols))
        if ap.task_id is None:
            conn.execute(requests_t.insert().values(**request_cols(ap)))
        return
    if expect is not None:
        res = conn.execute(
            approvals_t.update()
            .where(approvals_t.c.id == ap.id, approvals_t.c.status == expect.value)
            .values(**cols)
        )
        if res.rowcount != 1:
            raise Lost
        return
    res = conn.execute(approvals_t.update().where(approvals_t.c.id == ap.id).values(**cols))
    if res.rowcount == 0:
        write_approval(conn, ap, None, insert=True)


def write_task(
    conn: Connection, task: Task, *, insert: bool, expect_state: TaskState | None
) -> None:
    """Insert a task, or update it if its version (and state) are as read."""
    if insert:
        conn.execute(tasks_t.insert().values(**task_cols(task, task.version)))
        return
    cond = [tasks_t.c.id == task.id, tasks_t.c.version == task.version]
    if expect_state is not None:
        cond.append(tasks_t.c.state == expect_state.value)
    res = conn.execute(tasks_t.update().where(*cond).values(**task_cols(task, task.version + 1)))
    if res.rowcount != 1:
        raise Lost


def revoke_grant(conn: Connection, grant_id: str, *, at: datetime) -> None:
    """Mark a grant revoked."""
    row = conn.execute(sa.select(grants_t.c.data).where(grants_t.c.id == grant_id)).first()
    if row is None:
        raise Lost
    grant = read_grant(row.data, grant_id)
    if grant is None:  # grants nothing already; the column keeps it out of every look-up
        conn.execute(grants_t.update().where(grants_t.c.id == grant_id).values(revoked=True))
        return
    grant.revoked_at = grant.revoked_at or at
    conn.execute(
        grants_t.update()
        .where(grants_t.c.id == grant_id)
        .values(revoked=True, data=grant.model_dump_json())
    )


def insert_outbox(conn: Connection, item: OutboxItem, *, postgres: bool, at: datetime) -> None:
    """Queue a platform call unless one with the same key exists."""
    values = {
        "key": item.key,
        "surface": item.surface,
        "kind": item.kind,
        "approval_id": item.approval_id,
        "payload": dumps(item.payload),
        "attempts": 0,
        "done": False,
        "next_at": item.next_at or at,
    }
    dialect = postgresql if postgres else sqlite
    conn.execute(
        dialect.insert(outbox_t).values(**values).on_conflict_do_nothing(index_elements=["key"])
    )


def append_audit(conn: Connection, events: list[AuditEvent], *, at: datetime,
                 sealer: audit_chain.Sealer, postgres: bool) -> list[AuditEvent]:
    """Seal (and sign) events onto the chain, list a signing key new to it, move its head."""
    head = conn.execute(
        sa.select(head_t.c.count, head_t.c.hash).where(head_t.c.id == 1).with_for_update()
    ).one()
    sealed, fresh = sealer.seal(events, count=int(head[0]), prev=str(head[1]), at=at)
    if fresh:
        signing_keys.publish(conn, fresh, postgres=postgres)
    conn.execute(audit_t.insert(), [{"id": e.id, "task_id": e.task_id,
                                     "data": e.model_dump_json()} for e in sealed])
    last = sealed[-1]
    conn.execute(head_t.update().where(head_t.c.id == 1).values(count=last.id, hash=last.hash))
    return sealed
