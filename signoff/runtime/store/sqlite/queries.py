"""The hot statements of `SqliteTaskStore`, named, with the few lines that run each one.

Why raw SQL for these: measured here (bench/throughput.py), building, caching and running
a statement through SQLAlchemy Core costs ~0.7 ms, twenty times the ~33 µs a WAL commit
takes. Every task runs three writes (insert, claim, final save), and the approval flow
five reads (a task, an approval, the grants under a key, a card's copies, due outbox
jobs); an agent turn appends its transcript rows and a resumed agent reads them back.
Those ten are here. Everything else goes through the shared SQLAlchemy code of
the SQL store, where the statement cost does not matter.

The functions take the store thread's connection and never begin or end a transaction:
the thread does (see `thread.py`), so that a write here and a SQLAlchemy write share one.
Column formats are SQLAlchemy's own (naive UTC "YYYY-MM-DD HH:MM:SS.ffffff", booleans as
0/1), so both paths read and write the same rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from signoff.runtime.models import Approval, Grant, Task, TaskState
from signoff.runtime.store.port import CardRecord, OutboxItem
from signoff.runtime.store.readers import (
    read_approval,
    read_entry,
    read_grant,
    read_payload,
    read_task,
)
from signoff.runtime.store.sql.writes import Lost
from signoff.runtime.transcript import TranscriptEntry

_DT = "%Y-%m-%d %H:%M:%S.%f"

# -- writes ------------------------------------------------------------------------------
INSERT_TASK = ("INSERT INTO tasks (id, state, schedule, fire_time, claimed_by, lease_until, "
               "version, needs_plan, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
UPDATE_TASK = ("UPDATE tasks SET state = ?, schedule = ?, fire_time = ?, claimed_by = ?, "
               "lease_until = ?, version = ?, needs_plan = ?, data = ? "
               "WHERE id = ? AND version = ?")
CLAIM_NEXT = ("UPDATE tasks SET state = CASE WHEN needs_plan THEN 'planning' "
              "ELSE 'in_progress' END, claimed_by = ?, lease_until = ?, version = version + 1 "
              "WHERE seq = (SELECT seq FROM tasks WHERE state = ? "
              "AND (claimed_by IS NULL OR claimed_by = ?) ORDER BY seq LIMIT 1) "
              "AND state = ? RETURNING data, version, state, id")
APPEND = "INSERT INTO transcript (task_id, seq, role, at, data) VALUES (?, ?, ?, ?, ?)"

# -- reads -------------------------------------------------------------------------------
GET_TASK = "SELECT data, state, version, claimed_by, lease_until FROM tasks WHERE id = ?"
GET_APPROVAL = "SELECT data, id, task_id, expires_at FROM approvals WHERE id = ?"
GRANT_CANDIDATES = "SELECT data, used, id FROM grants WHERE key = ? AND revoked = 0 ORDER BY seq"
CARDS = "SELECT approval_id, surface, channel, message_id FROM cards WHERE approval_id = ?"
TRANSCRIPT = ("SELECT data, seq FROM transcript WHERE task_id = ? AND seq > ? ORDER BY seq "
              "LIMIT ?")
DUE_OUTBOX = ("SELECT id, key, surface, kind, approval_id, payload, attempts, next_at, error "
              "FROM outbox WHERE done = 0 AND next_at <= ? ORDER BY id LIMIT ?")


def sqlite_time(value: datetime | None) -> str | None:
    """A datetime as SQLAlchemy's SQLite dialect stores it (naive UTC text)."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None).strftime(_DT)


def read_time(value: str | None) -> datetime | None:
    """The inverse of `sqlite_time`."""
    return datetime.fromisoformat(value).replace(tzinfo=UTC) if value else None


def _task_values(task: Task, version: int) -> tuple[object, ...]:
    return (task.state.value, task.schedule, sqlite_time(task.fire_time), task.claimed_by,
            sqlite_time(task.lease_until), version, task.steps is None, task.model_dump_json())


def insert_task(conn: sqlite3.Connection, task: Task) -> None:
    """Insert a new task (sqlite3.IntegrityError on a duplicate id or schedule fire)."""
    conn.execute(INSERT_TASK, (task.id, *_task_values(task, task.version)))


def update_task(conn: sqlite3.Connection, task: Task) -> None:
    """Write a task if its stored version is still ``task.version`` (else `Lost`)."""
    cur = conn.execute(UPDATE_TASK, (*_task_values(task, task.version + 1), task.id,
                                     task.version))
    if cur.rowcount != 1:
        raise Lost


def append_transcript(conn: sqlite3.Connection, entries: Sequence[TranscriptEntry],
                      at: datetime) -> None:
    """Append entries, each stamped ``at`` unless it has its time (IntegrityError when one
    is already there: another writer of the same turn won)."""
    rows = []
    for entry in entries:
        entry.at = entry.at or at
        rows.append((entry.task_id, entry.seq, entry.role, sqlite_time(entry.at),
                     entry.model_dump_json()))
    conn.executemany(APPEND, rows)


def claim_next(conn: sqlite3.Connection, node_id: str, lease_until: datetime,
               from_state: TaskState) -> Task | None:
    """Take the oldest task in ``from_state`` that is for any node or for this one (a
    queued task's ``claimed_by`` names the node it waits for; one atomic UPDATE …
    RETURNING)."""
    row = conn.execute(CLAIM_NEXT, (node_id, sqlite_time(lease_until), from_state.value,
                                    node_id, from_state.value)).fetchone()
    if row is None:
        return None
    task = read_task(row[0], row[3])
    task.version = int(row[1])
    if task.unreadable is None:  # a stand-in stays FAILED (see store.readers)
        task.state = TaskState(row[2])
    task.claimed_by, task.lease_until = node_id, lease_until
    return task


def get_task(conn: sqlite3.Connection, task_id: str) -> Task | None:
    """One task, with the columns that claims change taken from the row."""
    row = conn.execute(GET_TASK, (task_id,)).fetchone()
    if row is None:
        return None
    task = read_task(row[0], task_id)
    task.version = int(row[2])
    if task.unreadable is None:  # a stand-in stays FAILED (see store.readers)
        task.state = TaskState(row[1])
    task.claimed_by, task.lease_until = row[3], read_time(row[4])
    return task


def get_approval(conn: sqlite3.Connection, approval_id: str) -> Approval | None:
    """One approval request."""
    row = conn.execute(GET_APPROVAL, (approval_id,)).fetchone()
    return approval_row(row) if row else None


def approval_row(row: Sequence[Any]) -> Approval:
    """(data, id, task_id, expires_at) of an approvals row as its request."""
    return read_approval(row[0], row[1], task_id=row[2], expires_at=read_time(row[3]))


def grant_candidates(conn: sqlite3.Connection, key: str) -> list[Grant]:
    """Unrevoked grants stored under ``key``, oldest first."""
    grants = []
    for data, used, grant_id in conn.execute(GRANT_CANDIDATES, (key,)).fetchall():
        grant = read_grant(data, grant_id)
        if grant is None:  # unreadable: grants nothing (see store.readers)
            continue
        grant.used = int(used)
        grants.append(grant)
    return grants


def cards(conn: sqlite3.Connection, approval_id: str) -> list[CardRecord]:
    """Every posted copy of an approval's card."""
    return [CardRecord(*row) for row in conn.execute(CARDS, (approval_id,)).fetchall()]


def transcript(conn: sqlite3.Connection, task_id: str, after: int,
               limit: int) -> list[TranscriptEntry]:
    """Transcript entries of a task after a seq, oldest first."""
    rows = conn.execute(TRANSCRIPT, (task_id, after, limit)).fetchall()
    return [read_entry(r[0], task_id, r[1]) for r in rows]


def due_outbox(conn: sqlite3.Connection, now: datetime, limit: int) -> list[OutboxItem]:
    """Undelivered outbox jobs whose time has come, oldest first."""
    rows = conn.execute(DUE_OUTBOX, (sqlite_time(now), limit)).fetchall()
    out = []
    for r in rows:
        payload, unreadable = read_payload(r[5], r[0])
        out.append(OutboxItem(id=r[0], key=r[1], surface=r[2], kind=r[3], approval_id=r[4],
                              payload=payload, attempts=r[6], next_at=read_time(r[7]),
                              error=r[8], unreadable=unreadable))
    return out
