"""The statements of console sessions on the SQL store (SQLite and PostgreSQL alike).

One row per signed-in console, keyed by a hash of its cookie's token; signing out
deletes it, and opening a session deletes those past their expiry, so the table holds
only live sessions (and the few expired since the last sign-in).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from signoff.runtime.store.port import ConsoleSession
from signoff.runtime.store.sql.tables import SessionRow

sessions_t = SessionRow.__table__  # type: ignore[attr-defined]


def open_session(conn: Connection, session: ConsoleSession, now: datetime) -> None:
    """Insert the session; delete the expired ones."""
    conn.execute(sessions_t.delete().where(sessions_t.c.expires_at <= now))
    conn.execute(sessions_t.insert().values(id=session.id, holder=session.holder,
                                            key_id=session.key_id,
                                            expires_at=session.expires_at))


def get(conn: Connection, session_id: str) -> ConsoleSession | None:
    """One session, or None."""
    row = conn.execute(sa.select(sessions_t).where(sessions_t.c.id == session_id)).first()
    return ConsoleSession(row.id, row.holder, row.key_id, row.expires_at) if row else None


def end(conn: Connection, session_id: str) -> None:
    """Delete one session."""
    conn.execute(sessions_t.delete().where(sessions_t.c.id == session_id))
