"""Groups of identical requests in the SQL store (see `signoff.runtime.coalesce`).

Each coalescing request has a row in ``coalesced``: its group and the request whose card
it shares. The row is written with the approval, in the same transaction; the reads join
it with ``approvals`` so a request's status is only ever the approval's own.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from signoff.runtime.models import Approval, ApprovalStatus
from signoff.runtime.store.readers import readable
from signoff.runtime.store.sql.rows import APPROVAL_COLS, approval_from, approvals_t, coalesce_t

PENDING = ApprovalStatus.PENDING.value


def write_group(conn: Connection, ap: Approval, *, postgres: bool) -> None:
    """Insert or update the group row of a coalescing request (nothing for others)."""
    if ap.coalesce_key is None:
        return
    dialect = postgresql if postgres else sqlite
    stmt = dialect.insert(coalesce_t).values(approval_id=ap.id, group_key=ap.coalesce_key,
                                             leader_id=ap.coalesced_into)
    conn.execute(stmt.on_conflict_do_update(index_elements=["approval_id"],
                                            set_={"leader_id": ap.coalesced_into}))


def leader(conn: Connection, group_key: str) -> Approval | None:
    """The oldest pending request of the group that has its own card."""
    # The group's own rows, ordered here rather than by the database: with ORDER BY seq
    # LIMIT 1, SQLite walked every pending request in seq order (the status index spares
    # it a sort) and probed each one's group, so each new request cost as much as all
    # those pending (10,000 pending: two thirds of the daemon's time, bench/waiters.py).
    # Unordered, the group key's index leads, and only the group's own cards are read.
    q = (sa.select(*APPROVAL_COLS, approvals_t.c.seq)
         .join(coalesce_t, coalesce_t.c.approval_id == approvals_t.c.id)
         .where(coalesce_t.c.group_key == group_key, coalesce_t.c.leader_id.is_(None),
                approvals_t.c.status == PENDING))
    row = min(conn.execute(q), key=lambda r: r.seq, default=None)
    found = approval_from(row) if row else None
    return found if found is not None and found.unreadable is None else None


def members(conn: Connection, leader_id: str) -> list[Approval]:
    """Every request that joined ``leader_id``'s card (any status), oldest first."""
    q = (sa.select(*APPROVAL_COLS)
         .join(coalesce_t, coalesce_t.c.approval_id == approvals_t.c.id)
         .where(coalesce_t.c.leader_id == leader_id).order_by(approvals_t.c.seq))
    return readable(approval_from(r) for r in conn.execute(q))


def strays(conn: Connection) -> list[Approval]:
    """Pending requests whose card's request is decided (a crash came between them)."""
    lead = approvals_t.alias("lead")
    q = (sa.select(*APPROVAL_COLS)
         .join(coalesce_t, coalesce_t.c.approval_id == approvals_t.c.id)
         .join(lead, lead.c.id == coalesce_t.c.leader_id)
         .where(approvals_t.c.status == PENDING, lead.c.status != PENDING)
         .order_by(approvals_t.c.seq))
    return readable(approval_from(r) for r in conn.execute(q))
