"""The statements of push subscriptions on the SQL store (SQLite and PostgreSQL alike).

One row per browser endpoint: subscribing again from the same browser replaces its row
(delete then insert, in one transaction), and the push service saying an endpoint is
gone (404/410) deletes it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from signoff.runtime.store.port import PushSubscription
from signoff.runtime.store.sql.tables import PushSubscriptionRow

push_t = PushSubscriptionRow.__table__  # type: ignore[attr-defined]


def _sub(row: Row[tuple[object, ...]]) -> PushSubscription:
    return PushSubscription(id=row.id, holder=row.holder, endpoint=row.endpoint,
                            p256dh=row.p256dh, auth=row.auth, created_at=row.created_at)


def add(conn: Connection, sub: PushSubscription) -> None:
    """Insert ``sub``, replacing a row of the same endpoint."""
    conn.execute(push_t.delete().where(push_t.c.endpoint == sub.endpoint))
    conn.execute(push_t.insert().values(id=sub.id, holder=sub.holder, endpoint=sub.endpoint,
                                        p256dh=sub.p256dh, auth=sub.auth,
                                        created_at=sub.created_at))


def listed(conn: Connection, holder: str | None) -> list[PushSubscription]:
    """``holder``'s subscriptions (None: all), oldest first."""
    query = sa.select(push_t).order_by(push_t.c.created_at, push_t.c.id)
    if holder is not None:
        query = query.where(push_t.c.holder == holder)
    return [_sub(row) for row in conn.execute(query)]


def remove(conn: Connection, sub_id: str, holder: str | None) -> bool:
    """Delete one (``holder``'s only, when given); True when a row went."""
    query = push_t.delete().where(push_t.c.id == sub_id)
    if holder is not None:
        query = query.where(push_t.c.holder == holder)
    return bool(conn.execute(query).rowcount)
