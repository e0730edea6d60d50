"""The node registry's statements on the SQL store (SQLite and PostgreSQL alike).

Kept apart from the store's task and approval paths: one upsert per heartbeat, one
delete on a clean shutdown, one select for `signoff nodes` and ``/health``. Every time
compared here comes from the caller's Clock (see `signoff.runtime.nodes`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from signoff.runtime.store.port import NodeRecord
from signoff.runtime.store.sql.tables import NodeRow

nodes_t = NodeRow.__table__  # type: ignore[attr-defined]


def beat(conn: Connection, node: NodeRecord, *, forget_before: datetime, postgres: bool) -> None:
    """Upsert the node's row, then forget nodes dead since before ``forget_before``."""
    values: dict[str, Any] = {"id": node.id, "host": node.host, "started_at": node.started_at,
                              "last_beat": node.last_beat, "live_until": node.live_until,
                              "running": node.running}
    insert = (postgresql if postgres else sqlite).insert(nodes_t).values(**values)
    conn.execute(insert.on_conflict_do_update(
        index_elements=["id"], set_={k: v for k, v in values.items() if k != "id"}))
    conn.execute(nodes_t.delete().where(nodes_t.c.live_until < forget_before))


def leave(conn: Connection, node_id: str) -> None:
    """Delete the node's row."""
    conn.execute(nodes_t.delete().where(nodes_t.c.id == node_id))


def live(conn: Connection, now: datetime) -> list[NodeRecord]:
    """Rows whose ``live_until`` is after ``now``, by id."""
    q = sa.select(nodes_t).where(nodes_t.c.live_until > now).order_by(nodes_t.c.id)
    return [NodeRecord(id=r.id, host=r.host, started_at=r.started_at, last_beat=r.last_beat,
                       live_until=r.live_until, running=r.running) for r in conn.execute(q)]
