"""The statements of undelivered cards on the SQL store (SQLite and PostgreSQL alike).

A card given up on a surface is one row per (approval, surface); a second mark keeps the
first (its ``since``); `forget` drops rows once the request is decided or the card
arrived after all (the bot layer decides which, see `signoff.bot.failover`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from signoff.runtime.store.port import UndeliveredCard
from signoff.runtime.store.sql.tables import UndeliveredRow

undelivered_t = UndeliveredRow.__table__  # type: ignore[attr-defined]


def mark(conn: Connection, card: UndeliveredCard, *, postgres: bool) -> None:
    """Insert the row unless one for this approval and surface exists."""
    insert = (postgresql if postgres else sqlite).insert(undelivered_t).values(
        approval_id=card.approval_id, surface=card.surface, error=card.error[:500],
        since=card.since)
    conn.execute(insert.on_conflict_do_nothing())


def listed(conn: Connection, limit: int) -> list[UndeliveredCard]:
    """The oldest ``limit`` rows."""
    q = (sa.select(undelivered_t)
         .order_by(undelivered_t.c.since, undelivered_t.c.approval_id).limit(limit))
    return [UndeliveredCard(r.approval_id, r.surface, r.error, r.since) for r in conn.execute(q)]


def forget(conn: Connection, approval_id: str, surface: str) -> None:
    """Delete one row."""
    conn.execute(undelivered_t.delete().where(undelivered_t.c.approval_id == approval_id,
                                              undelivered_t.c.surface == surface))
