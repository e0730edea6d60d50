"""Outside requests in `SqliteTaskStore`: their hot path on sqlite3, and their lookup.

The statements of a request's change are `sql.request_steps`' (written once for both
databases); here they run on the store thread's sqlite3 connection, under a savepoint
of its transaction (the store's), so a change is all-or-nothing by itself.
"""

from __future__ import annotations

import sqlite3

from signoff.runtime import audit as audit_chain
from signoff.runtime.models import Approval, AuditEvent
from signoff.runtime.store.port import Change
from signoff.runtime.store.sql.request_steps import Dialect, request_steps, run_steps
from signoff.runtime.store.sqlite.queries import approval_row, sqlite_time

FIND_REQUEST = ("SELECT a.data, a.id, a.task_id, a.expires_at FROM requests r "
                "JOIN approvals a ON a.id = r.approval_id "
                "WHERE r.idempotency_key = ?")
SQLITE = Dialect(time=sqlite_time)


def find_request(conn: sqlite3.Connection, idempotency_key: str) -> Approval | None:
    """The outside request stored under an idempotency key."""
    row = conn.execute(FIND_REQUEST, (idempotency_key,)).fetchone()
    return approval_row(row) if row else None


def request_change(conn: sqlite3.Connection, ch: Change, sealer: audit_chain.Sealer
                   ) -> list[AuditEvent]:
    """Write a Change of one outside request; return its audit events, sealed. A lost
    compare-and-set raises `Lost`, a duplicate id or idempotency key
    sqlite3.IntegrityError (the caller's savepoint undoes what was written)."""
    return run_steps(conn, request_steps(ch, sealer, SQLITE))
