"""The statements of the signing keys' list on the SQL store (SQLite and PostgreSQL).

A key is inserted when it signs its first event, in that event's transaction, and
never deleted: a retired key only gets its ``retired_at``, so receipts it signed stay
verifiable against the published list.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from signoff.runtime.signing import PublicKey
from signoff.runtime.store.sql.tables import SigningKeyRow

keys_t = SigningKeyRow.__table__  # type: ignore[attr-defined]


def publish(conn: Connection, keys: list[PublicKey], *, postgres: bool) -> None:
    """Insert the keys not listed yet (a listed key keeps its row)."""
    dialect = postgresql if postgres else sqlite
    for key in keys:
        conn.execute(dialect.insert(keys_t).values(
            kid=key.kid, public_key=key.public_key, node_id=key.node_id,
            created_at=key.created_at, retired_at=key.retired_at, since=key.since,
        ).on_conflict_do_nothing(index_elements=["kid"]))


def listed(conn: Connection) -> list[PublicKey]:
    """Every listed key, oldest first."""
    rows = conn.execute(sa.select(keys_t).order_by(keys_t.c.created_at, keys_t.c.kid))
    return [PublicKey(kid=r.kid, public_key=r.public_key, node_id=r.node_id,
                      created_at=r.created_at, retired_at=r.retired_at, since=r.since)
            for r in rows]


def retire(conn: Connection, kid: str, at: datetime) -> bool:
    """Mark a key retired (the first retirement time stays); False when not listed."""
    found = conn.execute(sa.select(keys_t.c.retired_at).where(keys_t.c.kid == kid)).first()
    if found is None:
        return False
    if found.retired_at is None:
        conn.execute(keys_t.update().where(keys_t.c.kid == kid).values(retired_at=at))
    return True
