"""Hand-written SQL for the three statements every task runs, on raw sqlite3 connections.

Measured here (bench/throughput.py): building, caching and executing each statement
through SQLAlchemy Core costs ~0.7 ms, twenty times the ~33 µs a WAL commit takes, and
every task needs three of them (insert, claim, final save). The embedded default is
SQLite, so those three bypass SQLAlchemy; everything else (approvals, grants, audit,
queries) stays on SQLAlchemy Core, where the statement cost does not matter. The column
formats are SQLAlchemy's own (naive-UTC "YYYY-MM-DD HH:MM:SS.ffffff"), so both paths read
and write the same rows.

Five hot reads (a task, an approval, a grant by key, a card's copies, due outbox jobs) are
done the same
way: in WAL mode a reader never waits for a writer, so they always run inline.

Outside requests (POST /v1/approvals) have their own hot path: every change of a request
without a task — stored (with its audit events and card jobs), decided (with its grant),
expired, its outcome recorded — is one raw transaction (`request_change`), and a request
is found by idempotency key inline. Most of an outside agent's calls are settled by the
policy at once (READ), so this is what an agent pays for on nearly every tool call; and a
decision reaches a waiting agent without a hop through SQLAlchemy.

The store first tries the writes inline on the event loop with a zero busy
timeout: an uncontended WAL write is a ~35 µs call (measured), cheaper than the hop to a
database thread and back (~250 µs, the hop, not SQLite, dominated the profile). If the
file is locked (another process or the store's own thread is writing), `Busy` is raised
at once and the store retries in its database thread, where waiting is harmless. So the
event loop never waits for a lock.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from signoff.runtime import audit as audit_chain
from signoff.runtime.models import Approval, AuditEvent, Grant, Task, TaskState
from signoff.runtime.store.port import Change, OutboxItem

_DT = "%Y-%m-%d %H:%M:%S.%f"

INSERT = ("INSERT INTO tasks (id, state, schedule, fire_time, claimed_by, lease_until, "
          "version, needs_plan, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
UPDATE = ("UPDATE tasks SET state = ?, schedule = ?, fire_time = ?, claimed_by = ?, "
          "lease_until = ?, version = ?, needs_plan = ?, data = ? "
          "WHERE id = ? AND version = ?")
CLAIM_NEXT = ("UPDATE tasks SET state = CASE WHEN needs_plan THEN 'planning' "
              "ELSE 'in_progress' END, claimed_by = ?, lease_until = ?, version = version + 1 "
              "WHERE seq = (SELECT seq FROM tasks WHERE state = ? ORDER BY seq LIMIT 1) "
              "AND state = ? RETURNING data, version, state")


GET_TASK = "SELECT data, state, version, claimed_by, lease_until FROM tasks WHERE id = ?"
GET_APPROVAL = "SELECT data FROM approvals WHERE id = ?"
GRANT_CANDIDATES = "SELECT data, used FROM grants WHERE key = ? AND revoked = 0 ORDER BY seq"
FIND_REQUEST = ("SELECT a.data FROM requests r JOIN approvals a ON a.id = r.approval_id "
                "WHERE r.idempotency_key = ?")
INSERT_APPROVAL = ("INSERT INTO approvals (id, task_id, status, expires_at, data) "
                   "VALUES (?, ?, ?, ?, ?)")
UPDATE_APPROVAL = "UPDATE approvals SET status = ?, expires_at = ?, data = ? WHERE id = ?"
INSERT_GRANT = ("INSERT INTO grants (id, key, policy_id, task_id, scope, max_calls, used, "
                "revoked, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
REPORTED = "UPDATE requests SET reported = 1 WHERE approval_id = ? AND reported = 0"
INSERT_REQUEST = ("INSERT INTO requests (approval_id, idempotency_key, policy_id, capability, "
                  "reported) VALUES (?, ?, ?, ?, 0)")
HEAD = "SELECT count, hash FROM audit_head WHERE id = 1"
INSERT_AUDIT = "INSERT INTO audit (id, task_id, data) VALUES (?, ?, ?)"
MOVE_HEAD = "UPDATE audit_head SET count = ?, hash = ? WHERE id = 1"
INSERT_OUTBOX = ("INSERT OR IGNORE INTO outbox (key, surface, kind, approval_id, payload, "
                 "attempts, done, next_at) VALUES (?, ?, ?, ?, ?, 0, 0, ?)")
CARDS = "SELECT approval_id, surface, channel, message_id FROM cards WHERE approval_id = ?"
DUE_OUTBOX = ("SELECT id, key, surface, kind, approval_id, payload, attempts, next_at, error "
              "FROM outbox WHERE done = 0 AND next_at <= ? ORDER BY id LIMIT ?")


def read_time(value: str | None) -> datetime | None:
    """The inverse of `sqlite_time`."""
    return datetime.fromisoformat(value).replace(tzinfo=UTC) if value else None


def sqlite_time(value: datetime | None) -> str | None:
    """A datetime as SQLAlchemy's SQLite dialect stores it (naive UTC text)."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).strftime(_DT)


class Lost(Exception):
    """The row was changed by someone else (version mismatch)."""


class Busy(Exception):
    """The database file is locked right now (only with a zero busy timeout)."""


class FastSqlite:
    """The hot path of `SqlTaskStore` on SQLite. Used from the store's single DB thread."""

    def __init__(self, path: str, *, busy_ms: int = 30_000) -> None:
        self.path = path
        self.busy_ms = busy_ms
        self._conn: sqlite3.Connection | None = None
        self.commits = 0  # for benchmarks: transactions this path has committed

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=self.busy_ms / 1000,
                                   isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_ms)}")
            self._conn = conn
        return self._conn

    def close(self) -> None:
        """Close the connection (reopened on next use)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @staticmethod
    def _values(task: Task, version: int) -> tuple[object, ...]:
        return (task.state.value, task.schedule, sqlite_time(task.fire_time), task.claimed_by,
                sqlite_time(task.lease_until), version, task.steps is None,
                task.model_dump_json())

    def _begin(self) -> sqlite3.Connection:
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode == sqlite3.SQLITE_BUSY:
                raise Busy from exc
            raise
        return conn

    def _commit(self, conn: sqlite3.Connection) -> None:
        conn.execute("COMMIT")
        self.commits += 1

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def insert_task(self, task: Task) -> None:
        """Insert a new task (raises sqlite3.IntegrityError on a duplicate)."""
        conn = self._begin()
        try:
            conn.execute(INSERT, (task.id, *self._values(task, task.version)))
            self._commit(conn)
        except BaseException:
            self._rollback(conn)
            raise

    def update_task(self, task: Task) -> None:
        """Write a task if its stored version is still ``task.version`` (else `Lost`)."""
        conn = self._begin()
        try:
            cur = conn.execute(UPDATE, (*self._values(task, task.version + 1), task.id,
                                        task.version))
            if cur.rowcount != 1:
                raise Lost
            self._commit(conn)
        except BaseException:
            self._rollback(conn)
            raise

    def request_change(self, ch: Change) -> list[AuditEvent]:
        """Apply a Change of an outside request (no task) in one transaction, as
        `sql.writes.apply_change` would; return its audit events, sealed. A lost
        compare-and-set raises `Lost`, a duplicate id or idempotency key
        sqlite3.IntegrityError; either way nothing is written."""
        ap = ch.approval
        assert ap is not None and ch.task is None
        conn = self._begin()
        try:
            self._write_request(conn, ch, ap)
            sealed = self._append_audit(conn, ch.audit, ch.at)
            for item in ch.outbox:
                conn.execute(INSERT_OUTBOX, (item.key, item.surface, item.kind,
                                             item.approval_id, _dumps(item.payload),
                                             sqlite_time(item.next_at or ch.at)))
            self._commit(conn)
        except BaseException:
            self._rollback(conn)
            raise
        return sealed

    @staticmethod
    def _write_request(conn: sqlite3.Connection, ch: Change, ap: Approval) -> None:
        cols = (ap.status.value, sqlite_time(ap.expires_at), ap.model_dump_json())
        if ch.insert_approval:
            conn.execute(INSERT_APPROVAL, (ap.id, ap.task_id or "", *cols))
            conn.execute(INSERT_REQUEST, (ap.id, ap.idempotency_key, ap.policy_id or "",
                                          ap.action.capability or ""))
        else:
            sql = UPDATE_APPROVAL
            params: tuple[object, ...] = (*cols, ap.id)
            if ch.approval_expect is not None:
                sql, params = sql + " AND status = ?", (*params, ch.approval_expect.value)
            if conn.execute(sql, params).rowcount != 1:
                raise Lost
        if ch.outcome_for is not None and conn.execute(REPORTED,
                                                       (ch.outcome_for,)).rowcount != 1:
            raise Lost
        for g in ch.grants:
            conn.execute(INSERT_GRANT, (g.id, g.key, g.policy_id, g.task_id, g.scope.value,
                                        g.max_calls, g.used, g.revoked_at is not None,
                                        g.model_dump_json()))

    @staticmethod
    def _append_audit(conn: sqlite3.Connection, events: list[AuditEvent],
                      at: datetime) -> list[AuditEvent]:
        """Seal events onto the chain and move its head (as `sql.writes.append_audit`)."""
        if not events:
            return []
        count, prev = conn.execute(HEAD).fetchone()
        sealed = []
        for event in events:
            count += 1
            event.at = at  # sealed at the time of the change it records
            done = audit_chain.seal(event, event_id=count, prev_hash=prev)
            conn.execute(INSERT_AUDIT, (count, done.task_id, done.model_dump_json()))
            prev = done.hash
            sealed.append(done)
        conn.execute(MOVE_HEAD, (count, prev))
        return sealed

    def claim_next(self, node_id: str, lease_until: datetime,
                   from_state: TaskState) -> Task | None:
        """Take the oldest task in ``from_state`` atomically."""
        conn = self._begin()
        try:
            row = conn.execute(CLAIM_NEXT, (node_id, sqlite_time(lease_until),
                                            from_state.value, from_state.value)).fetchone()
            self._commit(conn)
        except BaseException:
            self._rollback(conn)
            raise
        if row is None:
            return None
        task = Task.model_validate_json(row[0])
        task.version, task.state = int(row[1]), TaskState(row[2])
        task.claimed_by, task.lease_until = node_id, lease_until
        return task

    # -- reads (never wait in WAL mode) ---------------------------------------------------
    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self._connection().execute(sql, params).fetchone()

    def get_task(self, task_id: str) -> Task | None:
        """One task, with the columns that claims change taken from the row."""
        row = self._one(GET_TASK, (task_id,))
        if row is None:
            return None
        task = Task.model_validate_json(row[0])
        task.state, task.version = TaskState(row[1]), int(row[2])
        task.claimed_by, task.lease_until = row[3], read_time(row[4])
        return task

    def get_approval(self, approval_id: str) -> Approval | None:
        """One approval request."""
        row = self._one(GET_APPROVAL, (approval_id,))
        return Approval.model_validate_json(row[0]) if row else None

    def grant_candidates(self, key: str) -> list[Grant]:
        """Unrevoked grants stored under ``key``, oldest first."""
        grants = []
        for data, used in self._connection().execute(GRANT_CANDIDATES, (key,)).fetchall():
            grant = Grant.model_validate_json(data)
            grant.used = int(used)
            grants.append(grant)
        return grants

    def find_request(self, idempotency_key: str) -> Approval | None:
        """The outside request stored under an idempotency key."""
        row = self._one(FIND_REQUEST, (idempotency_key,))
        return Approval.model_validate_json(row[0]) if row else None

    def cards(self, approval_id: str) -> list[tuple[str, str, str, str]]:
        """(approval_id, surface, channel, message_id) of each posted copy."""
        conn = self._connection()
        return [tuple(r) for r in conn.execute(CARDS, (approval_id,)).fetchall()]

    def due_outbox(self, now: datetime, limit: int) -> list[OutboxItem]:
        """Undelivered outbox jobs whose time has come, oldest first."""
        rows = self._connection().execute(DUE_OUTBOX, (sqlite_time(now), limit)).fetchall()
        return [OutboxItem(id=r[0], key=r[1], surface=r[2], kind=r[3], approval_id=r[4],
                           payload=json.loads(r[5]), attempts=r[6], next_at=read_time(r[7]),
                           error=r[8]) for r in rows]


def _dumps(obj: object) -> str:
    # The same spelling as `sql.rows.dumps`, which the SQLAlchemy path writes.
    return json.dumps(obj, separators=(",", ":"), default=str)
