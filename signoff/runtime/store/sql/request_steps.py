"""The hot path of outside requests, written once for both databases' drivers.

Most of an outside agent's calls (POST /v1/approvals) are settled by the policy at once
(READ), so storing a request — with its audit event and card job — is what an agent pays
for on nearly every tool call; and a decision reaches a waiting agent sooner without the
SQLAlchemy statement cost. Every change of a request without a task (stored, decided with
its grant, expired, its outcome recorded, its coalescing group row, its refusal) is
written here as `writes.apply_change` would write it.

The rule is a generator of statements (`request_steps`) that never touches a connection:
it yields each statement (and is sent back a query's row), so SQLite's sqlite3 (a thread,
sync: `run_steps`) and PostgreSQL's async psycopg (on the event loop, in pipeline mode:
the statements of a change in two round trips, not one each) run the same statements in
the same order, each change in its own transaction. The statements are written
once, in the syntax both databases take (``ON CONFLICT … DO NOTHING``, ``TRUE``), with
``?`` placeholders; a `Dialect` says what differs: placeholders, how a time is stored
and row locks (``FOR UPDATE`` on PostgreSQL; SQLite's BEGIN IMMEDIATE already serializes
writers). Column formats are SQLAlchemy's own, as in `tables.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.runtime import audit as audit_chain
from signoff.runtime.denials import remembered_refusal
from signoff.runtime.models import Approval, AuditEvent
from signoff.runtime.store.port import Change
from signoff.runtime.store.sql.rows import dumps
from signoff.runtime.store.sql.writes import Lost

INSERT_APPROVAL = ("INSERT INTO approvals (id, task_id, status, expires_at, data) "
                   "VALUES (?, ?, ?, ?, ?)")
INSERT_REQUEST = ("INSERT INTO requests (approval_id, idempotency_key, policy_id, capability, "
                  "reported) VALUES (?, ?, ?, ?, FALSE)")
GET_DATA = "SELECT data FROM approvals WHERE id = ?"
UPDATE_APPROVAL = "UPDATE approvals SET status = ?, expires_at = ?, data = ? WHERE id = ?"
WRITE_GROUP = ("INSERT INTO coalesced (approval_id, group_key, leader_id) VALUES (?, ?, ?) "
               "ON CONFLICT (approval_id) DO UPDATE SET leader_id = excluded.leader_id")
INSERT_REFUSAL = ("INSERT INTO refusals (approval_id, policy_id, refusal_key, decided_at) "
                  "VALUES (?, ?, ?, ?) ON CONFLICT (approval_id) DO NOTHING")
REPORTED = "UPDATE requests SET reported = TRUE WHERE approval_id = ? AND reported = FALSE"
INSERT_GRANT = ("INSERT INTO grants (id, key, policy_id, task_id, scope, max_calls, used, "
                "revoked, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
HEAD = "SELECT count, hash FROM audit_head WHERE id = 1"
INSERT_AUDIT = "INSERT INTO audit (id, task_id, data) VALUES (?, ?, ?)"
MOVE_HEAD = "UPDATE audit_head SET count = ?, hash = ? WHERE id = 1"
INSERT_KEY = ("INSERT INTO signing_keys (kid, public_key, node_id, created_at, retired_at, "
              "since) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kid) DO NOTHING")
INSERT_OUTBOX = ("INSERT INTO outbox (key, surface, kind, approval_id, payload, attempts, done, "
                 "next_at) VALUES (?, ?, ?, ?, ?, 0, FALSE, ?) ON CONFLICT (key) DO NOTHING")


@dataclass(frozen=True)
class Dialect:
    """What differs between the databases for these statements."""

    time: Callable[[datetime | None], Any]  # a datetime as the driver stores the column
    postgres: bool = False

    def sql(self, text: str, *, lock: bool = False) -> str:
        """``text`` in the driver's placeholders, with a row lock where one is taken."""
        if not self.postgres:
            return text
        return (text + " FOR UPDATE" if lock else text).replace("?", "%s")


@dataclass(frozen=True)
class Run:
    """Execute a statement. With ``expect``, a compare-and-set: the driver raises `Lost`
    unless it changed that many rows — at once, or (PostgreSQL's pipeline) before the
    commit; nothing the steps write later depends on it, and `Lost` undoes all of it."""

    sql: str
    params: tuple[Any, ...]
    expect: int | None = None


@dataclass(frozen=True)
class One:
    """Execute a query; sent back its first row (None when there is none)."""

    sql: str
    params: tuple[Any, ...]


@dataclass(frozen=True)
class Many:
    """Execute a statement once per row of parameters; sent back nothing."""

    sql: str
    rows: list[tuple[Any, ...]]


Step = Run | One | Many
Steps = Generator[Step, Any, list[AuditEvent]]


def request_steps(ch: Change, sealer: audit_chain.Sealer, d: Dialect) -> Steps:
    """The statements of a Change of one outside request, in order; returns its audit
    events, sealed. A lost compare-and-set raises `Lost`, here or (a `Run`'s ``expect``)
    in the driver, and the driver's transaction undoes what was written; a duplicate id
    or idempotency key is the driver's IntegrityError."""
    ap = ch.approval
    assert ap is not None and ch.task is None and ap.task_id is None
    yield from _write_approval(ch, ap, d)
    if ap.coalesce_key is not None:  # its group row, as `groups.write_group`
        yield Run(d.sql(WRITE_GROUP), (ap.id, ap.coalesce_key, ap.coalesced_into))
    refused = remembered_refusal(ap)
    if refused is not None:
        yield Run(d.sql(INSERT_REFUSAL), (ap.id, ap.policy_id or "", refused,
                                           d.time(ap.decided_at)))
    if ch.outcome_for is not None:
        yield Run(d.sql(REPORTED), (ch.outcome_for,), expect=1)
    for g in ch.grants:
        yield Run(d.sql(INSERT_GRANT), (g.id, g.key, g.policy_id, g.task_id, g.scope.value,
                                        g.max_calls, g.used, g.revoked_at is not None,
                                        g.model_dump_json()))
    for item in ch.outbox:
        yield Run(d.sql(INSERT_OUTBOX), (item.key, item.surface, item.kind, item.approval_id,
                                         dumps(item.payload), d.time(item.next_at or ch.at)))
    # Last: every writer of the audit chain waits for its head's lock, held to the commit.
    return (yield from _append_audit(ch.audit, ch.at, sealer, d))


def _write_approval(ch: Change, ap: Approval, d: Dialect) -> Generator[Step, Any, None]:
    cols = (ap.status.value, d.time(ap.expires_at), ap.model_dump_json())
    if ch.insert_approval:
        # "" for the task: databases made before outside requests have task_id NOT NULL.
        yield Run(d.sql(INSERT_APPROVAL), (ap.id, "", *cols))
        yield Run(d.sql(INSERT_REQUEST), (ap.id, ap.idempotency_key, ap.policy_id or "",
                                          ap.action.capability or ""))
        return
    if ch.approval_votes is not None:
        # The count lives in the row's JSON: read it under the row's lock, in this
        # transaction, so nobody writes between the read and the update.
        row = yield One(d.sql(GET_DATA, lock=True), (ap.id,))
        if row is None or _votes(row[0]) != ch.approval_votes:
            raise Lost
    sql = UPDATE_APPROVAL
    params: tuple[Any, ...] = (*cols, ap.id)
    if ch.approval_expect is not None:
        sql, params = sql + " AND status = ?", (*params, ch.approval_expect.value)
    yield Run(d.sql(sql), params, expect=1)


def _votes(data: str | bytes) -> int | None:
    """How many quorum approvals a stored request holds (None when it cannot be read:
    the compare-and-set then loses rather than guesses)."""
    try:
        votes = json.loads(data).get("votes", [])
    except (ValueError, AttributeError):
        return None
    return len(votes) if isinstance(votes, list) else None


def _append_audit(events: list[AuditEvent], at: datetime, sealer: audit_chain.Sealer,
                  d: Dialect) -> Generator[Step, Any, list[AuditEvent]]:
    """Seal (and sign) events onto the chain under its head's lock, list a signing key
    new to it, and move its head (as `writes.append_audit`)."""
    if not events:
        return []
    count, prev = yield One(d.sql(HEAD, lock=True), ())
    sealed, fresh = sealer.seal(events, count=int(count), prev=str(prev), at=at)
    for key in fresh:
        yield Run(d.sql(INSERT_KEY), (key.kid, key.public_key, key.node_id,
                                      d.time(key.created_at), d.time(key.retired_at),
                                      key.since))
    yield Many(d.sql(INSERT_AUDIT), [(e.id, e.task_id, e.model_dump_json()) for e in sealed])
    yield Run(d.sql(MOVE_HEAD), (sealed[-1].id, sealed[-1].hash))
    return sealed


def run_steps(conn: Any, steps: Steps) -> list[AuditEvent]:
    """Run the steps on a DB-API connection (sqlite3), each in turn; the value the steps
    return."""
    result: Any = None
    try:
        while True:
            step = steps.send(result)
            result = None
            if isinstance(step, Many):
                conn.executemany(step.sql, step.rows)
                continue
            cur = conn.execute(step.sql, step.params)
            if isinstance(step, One):
                result = cur.fetchone()
            elif step.expect is not None and cur.rowcount != step.expect:
                raise Lost
    except StopIteration as done:
        return list(done.value)
