"""The hot path of outside requests in `SqliteTaskStore`: named statements, like queries.py.

Most of an outside agent's calls (POST /v1/approvals) are settled by the policy at once
(READ), so storing a request — with its audit event and card job — is what an agent pays
for on nearly every tool call; and a decision reaches a waiting agent sooner without the
SQLAlchemy statement cost. Every change of a request without a task (stored, decided with
its grant, expired, its outcome recorded, its coalescing group row) is written here as
`sql.writes.apply_change` would write it; the store runs it under a savepoint of the
thread's transaction, so it is all-or-nothing by itself. Column formats are SQLAlchemy's
own, as in queries.py.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime

from signoff.runtime import audit as audit_chain
from signoff.runtime.denials import remembered_refusal
from signoff.runtime.models import Approval, AuditEvent
from signoff.runtime.store.port import Change
from signoff.runtime.store.sql.writes import Lost
from signoff.runtime.store.sqlite.queries import approval_row, sqlite_time

FIND_REQUEST = ("SELECT a.data, a.id, a.task_id, a.expires_at FROM requests r "
                "JOIN approvals a ON a.id = r.approval_id "
                "WHERE r.idempotency_key = ?")
INSERT_APPROVAL = ("INSERT INTO approvals (id, task_id, status, expires_at, data) "
                   "VALUES (?, ?, ?, ?, ?)")
INSERT_REQUEST = ("INSERT INTO requests (approval_id, idempotency_key, policy_id, capability, "
                  "reported) VALUES (?, ?, ?, ?, 0)")
GET_DATA = "SELECT data, id, task_id, expires_at FROM approvals WHERE id = ?"
UPDATE_APPROVAL = "UPDATE approvals SET status = ?, expires_at = ?, data = ? WHERE id = ?"
INSERT_REFUSAL = ("INSERT OR IGNORE INTO refusals (approval_id, policy_id, refusal_key, "
                  "decided_at) VALUES (?, ?, ?, ?)")
WRITE_GROUP = ("INSERT INTO coalesced (approval_id, group_key, leader_id) VALUES (?, ?, ?) "
               "ON CONFLICT (approval_id) DO UPDATE SET leader_id = excluded.leader_id")
REPORTED = "UPDATE requests SET reported = 1 WHERE approval_id = ? AND reported = 0"
INSERT_GRANT = ("INSERT INTO grants (id, key, policy_id, task_id, scope, max_calls, used, "
                "revoked, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
HEAD = "SELECT count, hash FROM audit_head WHERE id = 1"
INSERT_AUDIT = "INSERT INTO audit (id, task_id, data) VALUES (?, ?, ?)"
MOVE_HEAD = "UPDATE audit_head SET count = ?, hash = ? WHERE id = 1"
INSERT_KEY = ("INSERT OR IGNORE INTO signing_keys (kid, public_key, node_id, created_at, since) "
              "VALUES (?, ?, ?, ?, ?)")
INSERT_OUTBOX = ("INSERT OR IGNORE INTO outbox (key, surface, kind, approval_id, payload, "
                 "attempts, done, next_at) VALUES (?, ?, ?, ?, ?, 0, 0, ?)")


def find_request(conn: sqlite3.Connection, idempotency_key: str) -> Approval | None:
    """The outside request stored under an idempotency key."""
    row = conn.execute(FIND_REQUEST, (idempotency_key,)).fetchone()
    return approval_row(row) if row else None


def request_change(conn: sqlite3.Connection, ch: Change, sealer: audit_chain.Sealer
                   ) -> list[AuditEvent]:
    """Write a Change of one outside request; return its audit events, sealed. A lost
    compare-and-set raises `Lost`, a duplicate id or idempotency key
    sqlite3.IntegrityError (the caller's savepoint undoes what was written)."""
    ap = ch.approval
    assert ap is not None and ch.task is None
    _write_approval(conn, ch, ap)
    if ap.coalesce_key is not None:  # its group row, as `sql.groups.write_group`
        conn.execute(WRITE_GROUP, (ap.id, ap.coalesce_key, ap.coalesced_into))
    refused = remembered_refusal(ap)
    if refused is not None and ap.decided_at is not None:
        conn.execute(INSERT_REFUSAL, (ap.id, ap.policy_id or "", refused,
                                      sqlite_time(ap.decided_at)))
    if ch.outcome_for is not None and conn.execute(REPORTED, (ch.outcome_for,)).rowcount != 1:
        raise Lost
    for g in ch.grants:
        conn.execute(INSERT_GRANT, (g.id, g.key, g.policy_id, g.task_id, g.scope.value,
                                    g.max_calls, g.used, g.revoked_at is not None,
                                    g.model_dump_json()))
    sealed = _append_audit(conn, ch.audit, ch.at, sealer)
    for item in ch.outbox:
        conn.execute(INSERT_OUTBOX, (item.key, item.surface, item.kind, item.approval_id,
                                     json.dumps(item.payload, separators=(",", ":"),
                                                default=str),
                                     sqlite_time(item.next_at or ch.at)))
    return sealed


def _write_approval(conn: sqlite3.Connection, ch: Change, ap: Approval) -> None:
    cols = (ap.status.value, sqlite_time(ap.expires_at), ap.model_dump_json())
    if ch.insert_approval:
        # "" for the task: databases made before outside requests have task_id NOT NULL.
        conn.execute(INSERT_APPROVAL, (ap.id, ap.task_id or "", *cols))
        conn.execute(INSERT_REQUEST, (ap.id, ap.idempotency_key, ap.policy_id or "",
                                      ap.action.capability or ""))
        return
    if ch.approval_votes is not None:
        # Inside the write transaction (BEGIN IMMEDIATE): nobody writes between the two.
        row = conn.execute(GET_DATA, (ap.id,)).fetchone()
        if row is None or len(approval_row(row).votes) != ch.approval_votes:
            raise Lost
    sql = UPDATE_APPROVAL
    params: tuple[object, ...] = (*cols, ap.id)
    if ch.approval_expect is not None:
        sql, params = sql + " AND status = ?", (*params, ch.approval_expect.value)
    if conn.execute(sql, params).rowcount != 1:
        raise Lost


def _append_audit(conn: sqlite3.Connection, events: list[AuditEvent],
                  at: datetime, sealer: audit_chain.Sealer) -> list[AuditEvent]:
    """Seal (and sign) events onto the chain, list a signing key new to it, and move its
    head (as `sql.writes.append_audit`)."""
    if not events:
        return []
    count, prev = conn.execute(HEAD).fetchone()
    sealed, fresh = sealer.seal(events, count=count, prev=prev, at=at)
    for key in fresh:
        conn.execute(INSERT_KEY, (key.kid, key.public_key, key.node_id,
                                  sqlite_time(key.created_at), key.since))
    conn.executemany(INSERT_AUDIT, [(e.id, e.task_id, e.model_dump_json()) for e in sealed])
    conn.execute(MOVE_HEAD, (sealed[-1].id, sealed[-1].hash))
    return sealed
