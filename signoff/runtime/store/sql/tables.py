"""SQLModel tables of the SQL store.

Each row keeps the full record as JSON text in ``data`` plus the few columns that
queries filter or sort on. JSON text (not a native JSON type) keeps SQLite and
PostgreSQL byte-identical, which the audit chain's hashes rely on.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

# The advisory lock every node holds while it creates tables on PostgreSQL: two nodes
# started together would both find a table missing and both create it.
SCHEMA_LOCK = 0x5167_6E6F_6666  # "signoff"


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, on SQLite and PostgreSQL alike.

    SQLite has no time zones: values are stored as naive UTC so that comparisons in SQL
    (lease and expiry checks) order correctly.
    """

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store (use aware UTC)")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None else None


UTC_DT = UtcDateTime()


class TaskRow(SQLModel, table=True):
    """A task; ``seq`` orders tasks and is the pagination cursor."""

    __tablename__ = "tasks"
    __table_args__ = (
        sa.UniqueConstraint("schedule", "fire_time", name="uq_task_schedule_fire"),
        sa.Index("ix_tasks_state_seq", "state", "seq"),
    )
    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(sa_column=sa.Column(sa.String(40), unique=True, nullable=False))
    state: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    schedule: str | None = Field(default=None, sa_column=sa.Column(sa.String(200)))
    fire_time: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DT))
    claimed_by: str | None = Field(default=None, sa_column=sa.Column(sa.String(100)))
    lease_until: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DT))
    version: int = Field(default=0)
    needs_plan: bool = Field(default=True)
    data: str = Field(sa_column=sa.Column(sa.Text, nullable=False))


class ApprovalRow(SQLModel, table=True):
    """An approval request (history of every request ever made)."""

    __tablename__ = "approvals"
    __table_args__ = (
        sa.Index("ix_approvals_status_expires", "status", "expires_at"),
        # The pending list, oldest first, read in index order: without it every page
        # sorted all pending requests (9x slower at 100,000 pending, bench/pending.py).
        sa.Index("ix_approvals_status_seq", "status", "seq"),
    )
    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(sa_column=sa.Column(sa.String(40), unique=True, nullable=False))
    task_id: str = Field(sa_column=sa.Column(sa.String(40), index=True, nullable=False))
    status: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    expires_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    data: str = Field(sa_column=sa.Column(sa.Text, nullable=False))


class CoalesceRow(SQLModel, table=True):
    """Which group of identical requests an approval belongs to, and whose card it shares.

    A side table (not columns of ``approvals``) so that a database made before coalescing
    gets it from ``create_all`` with no migration. Only requests made with coalescing on
    have a row.
    """

    __tablename__ = "coalesced"
    approval_id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    group_key: str = Field(sa_column=sa.Column(sa.String(80), index=True, nullable=False))
    leader_id: str | None = Field(default=None,
                                  sa_column=sa.Column(sa.String(40), index=True))


class RequestRow(SQLModel, table=True):
    """What queries need of an outside request (an approval without a task).

    A table of its own rather than columns on ``approvals``: databases made before
    outside requests existed get it from ``create_all`` and keep working unchanged
    (their ``approvals.task_id`` is NOT NULL, so an outside request stores "" there).
    """

    __tablename__ = "requests"
    __table_args__ = (sa.Index("ix_requests_policy_capability", "policy_id", "capability"),)
    approval_id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    idempotency_key: str | None = Field(
        default=None, sa_column=sa.Column(sa.String(400), unique=True, nullable=True))
    policy_id: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    capability: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    reported: bool = Field(default=False)  # an outcome was recorded (at most once)


class RefusalRow(SQLModel, table=True):
    """A person's deny of an outside request, under its refusal key (approvals.remember_deny).

    Written with the deny, so that "was this very action refused lately?" is one index
    probe: looking among the denied requests read every one of them (and only the newest
    50, which an agent's own retries, each refused at once, soon filled). A table of its
    own so a database made before it gets it from ``create_all``; the store fills it from
    the denied requests already there when it creates it.
    """

    __tablename__ = "refusals"
    __table_args__ = (sa.Index("ix_refusals_key", "policy_id", "refusal_key", "decided_at"),)
    approval_id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    policy_id: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    refusal_key: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    decided_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))


class GrantRow(SQLModel, table=True):
    """A grant for one action fingerprint."""

    __tablename__ = "grants"
    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(sa_column=sa.Column(sa.String(40), unique=True, nullable=False))
    key: str = Field(sa_column=sa.Column(sa.String(400), index=True, nullable=False))
    policy_id: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    task_id: str | None = Field(default=None, sa_column=sa.Column(sa.String(40)))
    scope: str = Field(sa_column=sa.Column(sa.String(10), nullable=False))
    max_calls: int | None = Field(default=None)
    used: int = Field(default=0)
    revoked: bool = Field(default=False)
    data: str = Field(sa_column=sa.Column(sa.Text, nullable=False))


class AuditRow(SQLModel, table=True):
    """One audit event; ``id`` is its place in the chain."""

    __tablename__ = "audit"
    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    task_id: str | None = Field(default=None, sa_column=sa.Column(sa.String(40), index=True))
    data: str = Field(sa_column=sa.Column(sa.Text, nullable=False))


class AuditHeadRow(SQLModel, table=True):
    """The single row that serializes appends to the chain and remembers its head."""

    __tablename__ = "audit_head"
    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    count: int = Field(default=0)
    hash: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))


class CardRow(SQLModel, table=True):
    """Where one copy of an approval card was posted."""

    __tablename__ = "cards"
    approval_id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    surface: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    channel: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))
    message_id: str = Field(sa_column=sa.Column(sa.String(200), nullable=False))


class OutboxRow(SQLModel, table=True):
    """A platform call waiting to be made or retried."""

    __tablename__ = "outbox"
    __table_args__ = (sa.Index("ix_outbox_due", "done", "next_at"),)
    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(sa_column=sa.Column(sa.String(300), unique=True, nullable=False))
    surface: str = Field(sa_column=sa.Column(sa.String(40), nullable=False))
    kind: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    approval_id: str | None = Field(default=None, sa_column=sa.Column(sa.String(40)))
    payload: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    attempts: int = Field(default=0)
    done: bool = Field(default=False)
    next_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    error: str | None = Field(default=None, sa_column=sa.Column(sa.Text))


class TranscriptRow(SQLModel, table=True):
    """One message of an agent task's conversation; (task_id, seq) is unique, so two
    writers of the same turn cannot both append it."""

    __tablename__ = "transcript"
    task_id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    role: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    data: str = Field(sa_column=sa.Column(sa.Text, nullable=False))


class NodeRow(SQLModel, table=True):
    """One daemon in the node registry (see `signoff.runtime.nodes`).

    Every time in it is the writing node's Clock, never the database server's.
    """

    __tablename__ = "nodes"
    id: str = Field(sa_column=sa.Column(sa.String(100), primary_key=True))
    host: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    started_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    last_beat: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    live_until: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    running: int = Field(default=0)


class UndeliveredRow(SQLModel, table=True):
    """A card the outbox gave up posting on one surface (``GET /health`` "undelivered").

    A table of its own, not a query over the outbox: /health is asked often and the outbox
    only grows, while this holds the few failures, dropped once they no longer matter.
    """

    __tablename__ = "undelivered"
    approval_id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    surface: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    error: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    since: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))


class SessionRow(SQLModel, table=True):
    """A signed-in web console (`signoff.runtime.store.port.ConsoleSession`): shared by
    every node, so signing out on one ends the session on all of them."""

    __tablename__ = "console_sessions"
    id: str = Field(sa_column=sa.Column(sa.String(64), primary_key=True))
    holder: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    key_id: str = Field(sa_column=sa.Column(sa.String(64), nullable=False))
    expires_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False, index=True))


class PushSubscriptionRow(SQLModel, table=True):
    """A browser's push subscription (`signoff.runtime.store.port.PushSubscription`): a
    table of its own, so databases made before it get it from ``create_all``."""

    __tablename__ = "push_subscriptions"
    id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    holder: str = Field(sa_column=sa.Column(sa.String(255), index=True, nullable=False))
    endpoint: str = Field(sa_column=sa.Column(sa.String(2048), unique=True, nullable=False))
    p256dh: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    auth: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))


class SigningKeyRow(SQLModel, table=True):
    """A node's public signing key (`signoff.runtime.signing.PublicKey`): kept in the
    database so that any node can publish every node's keys, retired ones included."""

    __tablename__ = "signing_keys"
    kid: str = Field(sa_column=sa.Column(sa.String(64), primary_key=True))
    public_key: str = Field(sa_column=sa.Column(sa.String(100), nullable=False))
    node_id: str = Field(sa_column=sa.Column(sa.String(100), nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    retired_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DT))
    since: int = Field(default=0)


class PasskeyRow(SQLModel, table=True):
    """A registered passkey (`signoff.runtime.store.port.PasskeyRecord`): shared by every
    node, so a passkey registered or revoked on one counts on all of them. A table of its
    own, created by ``create_all`` in a database made before passkeys existed."""

    __tablename__ = "passkeys"
    id: str = Field(sa_column=sa.Column(sa.String(40), primary_key=True))
    credential_id: str = Field(sa_column=sa.Column(sa.String(1400), unique=True,
                                                   nullable=False))
    owner: str = Field(sa_column=sa.Column(sa.String(255), index=True, nullable=False))
    name: str = Field(sa_column=sa.Column(sa.String(100), nullable=False))
    public_key: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    sign_count: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False))
    rp_id: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False))
    revoked_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DT))


class PasskeyChallengeRow(SQLModel, table=True):
    """A WebAuthn challenge handed out (`PasskeyChallenge`): ``used_at`` is set once, by a
    compare-and-set, so an assertion over it is accepted at most once on any node."""

    __tablename__ = "passkey_challenges"
    challenge: str = Field(sa_column=sa.Column(sa.String(100), primary_key=True))
    purpose: str = Field(sa_column=sa.Column(sa.String(20), nullable=False))
    owner: str = Field(sa_column=sa.Column(sa.String(255), nullable=False))
    approval_id: str | None = Field(default=None, sa_column=sa.Column(sa.String(40)))
    fingerprint: str | None = Field(default=None, sa_column=sa.Column(sa.String(200)))
    decision: str | None = Field(default=None, sa_column=sa.Column(sa.String(20)))
    nonce: str | None = Field(default=None, sa_column=sa.Column(sa.String(100)))
    expires_at: datetime = Field(sa_column=sa.Column(UTC_DT, nullable=False, index=True))
    used_at: datetime | None = Field(default=None, sa_column=sa.Column(UTC_DT))
