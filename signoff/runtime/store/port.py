"""The task store port: everything the engine persists, behind one Protocol.

All state changes go through `TaskStore.commit(Change)`: one unit of work that writes a
task, its approval, grants, audit events and outbox items atomically, guarded by
compare-and-set checks (the task's version, the approval's status). A lost race returns
False and writes nothing, which is how "exactly once" is built on every backend.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from signoff.runtime.models import (
    Approval,
    ApprovalStatus,
    AuditEvent,
    Grant,
    JsonDict,
    Task,
    TaskState,
)
from signoff.runtime.signing import PublicKey
from signoff.runtime.transcript import TranscriptEntry

if TYPE_CHECKING:
    from signoff.runtime.audit import Sealer

T = TypeVar("T")


@dataclass
class OutboxItem:
    """One outbound platform call to make (and retry) after the commit."""

    key: str  # idempotency key: a second insert with the same key is ignored
    surface: str
    kind: str  # post | update | notify
    payload: JsonDict
    approval_id: str | None = None
    id: int = 0
    attempts: int = 0
    next_at: datetime | None = None
    done_at: datetime | None = None
    error: str | None = None
    # Why the stored payload cannot be read (``payload`` is then empty): the dispatcher
    # gives the job up rather than deliver it (see `signoff.runtime.store.readers`).
    unreadable: str | None = None


@dataclass(kw_only=True)
class Change:
    """One atomic unit of work, made at ``at`` by the node's Clock.

    ``at`` is the one time source of everything the store stamps while applying it
    (audit events, outbox items due now, revocations, deliveries): a store never reads
    the wall clock, so a node on a fake or shifted clock sees its own times back.
    ``task`` is inserted when ``expect_version`` is None and ``insert`` is True, else
    updated only if its stored version equals ``expect_version`` (its version is then
    bumped). ``approval_expect`` makes the approval write a compare-and-set on status;
    ``approval_votes`` also on how many quorum approvals (`Approval.votes`) the stored
    request holds, so two racing partial approvals of one request never lose one;
    ``insert_approval`` says the approval is new (a duplicate id or idempotency key
    loses). ``outcome_for`` records the outcome of that outside request once: the change
    loses if one was recorded before.
    ``transcript`` entries are appended; an entry whose (task id, seq) is already stored
    makes the whole change lose (two writers of one agent turn: the first wins).
    """

    at: datetime
    task: Task | None = None
    insert: bool = False
    expect_version: int | None = None
    expect_state: TaskState | None = None
    approval: Approval | None = None
    approval_expect: ApprovalStatus | None = None
    approval_votes: int | None = None
    insert_approval: bool = False
    outcome_for: str | None = None
    grants: list[Grant] = field(default_factory=list)
    grant_revokes: list[str] = field(default_factory=list)
    audit: list[AuditEvent] = field(default_factory=list)
    outbox: list[OutboxItem] = field(default_factory=list)
    outbox_done: list[int] = field(default_factory=list)  # ids of delivered outbox items
    transcript: list[TranscriptEntry] = field(default_factory=list)


@dataclass(frozen=True)
class Page(Generic[T]):
    """A page of tasks or audit events with the cursor of the next page."""

    items: Sequence[T]
    next_cursor: str | None


@dataclass(frozen=True)
class PendingRequest:
    """A pending approval request with its task (None for an outside request)."""

    approval: Approval
    task: Task | None = None


@dataclass(frozen=True)
class CardRecord:
    """Where an approval's card was posted on one surface."""

    approval_id: str
    surface: str
    channel: str
    message_id: str


@dataclass(frozen=True)
class UndeliveredCard:
    """A card the outbox gave up posting on one surface, and since when (``at`` of the
    give-up, the writing node's Clock)."""

    approval_id: str
    surface: str
    error: str
    since: datetime


@dataclass(frozen=True)
class ConsoleSession:
    """A signed-in web console, kept server-side so that signing out ends it everywhere.

    ``id`` is a hash of the cookie's token (the token itself is never stored), ``holder``
    the name of the key it signed in with and ``key_id`` a hash of that key (a changed
    key ends its sessions); ``expires_at`` by the signing-in node's Clock."""

    id: str
    holder: str
    key_id: str
    expires_at: datetime


@dataclass(frozen=True)
class PushSubscription:
    """A browser's push subscription (the Push API's ``PushSubscription``), made by one
    signed-in person in the console: notifications of the requests they may decide go to
    ``endpoint``, encrypted with ``p256dh`` and ``auth``. ``holder`` is the actor
    (``web:alice``); ``id`` is ours, random; ``created_at`` by the node's Clock."""

    id: str
    holder: str
    endpoint: str
    p256dh: str
    auth: str
    created_at: datetime


@dataclass(frozen=True)
class PasskeyRecord:
    """A registered passkey (WebAuthn credential) of one person (`signoff.runtime.passkeys`).

    ``credential_id`` and ``public_key`` (COSE) are base64url; ``owner`` is the account it
    was registered from (``web:alice``), compared by person; ``rp_id`` the relying party
    it was made for. A revoked passkey decides nothing, but stays stored so that
    ``audit --verify`` can still check the assertions it made before."""

    id: str
    credential_id: str
    owner: str
    name: str
    public_key: str
    sign_count: int
    rp_id: str
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True)
class PasskeyChallenge:
    """A WebAuthn challenge the server handed out, single-use until ``expires_at``.

    ``purpose`` "register" (creation options) or "decide" (request options of one
    approval: then ``approval_id``, ``fingerprint``, ``decision`` and the random ``nonce``
    are what the challenge was derived from, see `signoff.runtime.passkeys`)."""

    challenge: str
    purpose: str
    owner: str
    expires_at: datetime
    approval_id: str | None = None
    fingerprint: str | None = None
    decision: str | None = None
    nonce: str | None = None
    used_at: datetime | None = None


@dataclass(frozen=True)
class NodeRecord:
    """One daemon in the node registry, as its last heartbeat described it.

    Every time is the writing node's own Clock. ``live_until`` is the beat plus that
    node's own window, so a reader decides liveness by comparing it with *its* Clock —
    never with the database server's time (see `signoff.runtime.nodes`).
    """

    id: str
    host: str
    started_at: datetime
    last_beat: datetime
    live_until: datetime
    running: int  # tasks this node is working on right now

    def public(self) -> JsonDict:
        """The contract's shape (``signoff nodes --json``, ``/health`` ``"nodes"``)."""
        return {"id": self.id, "host": self.host, "started_at": self.started_at.isoformat(),
                "last_beat": self.last_beat.isoformat(), "running": self.running}


class TaskStore(Protocol):
    """Durable state of the daemon. Implementations: `SqliteTaskStore` (a SQLite file),
    `SqlTaskStore` (PostgreSQL, any SQLite), `MemTaskStore`; `factory.make_store` picks."""

    sealer: Sealer  # seals (and, given a signer, signs) the audit events of each commit

    async def open(self) -> None:
        """Create tables if needed and check the connection."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    async def reset(self) -> dict[str, int]:
        """Delete everything; return how many rows of each kind were removed."""
        ...

    async def commit(self, change: Change) -> bool:
        """Apply a unit of work atomically; False when a compare-and-set lost."""
        ...

    async def get_task(self, task_id: str) -> Task | None:
        """One task, or None."""
        ...

    async def list_tasks(self, *, state: TaskState | None = None, limit: int = 50,
                         cursor: str | None = None, schedule: str | None = None) -> Page[Task]:
        """Tasks, newest first."""
        ...

    async def count_by_state(self, states: Collection[TaskState] | None = None
                             ) -> dict[str, int]:
        """How many tasks are in each state (only ``states``, when given: counting a few
        live states costs what they hold, not what the whole history holds)."""
        ...

    async def claim_next(self, node_id: str, lease_until: datetime) -> Task | None:
        """Atomically take the oldest queued task this node may take (queued →
        planning/in_progress): a queued task's ``claimed_by`` is None (any node) or names
        the one node whose work dir it used (`Engine.requeue`)."""
        ...

    async def claim(self, task_id: str, node_id: str, lease_until: datetime,
                    from_state: TaskState) -> Task | None:
        """Atomically take one task in ``from_state``."""
        ...

    async def renew_lease(self, task_id: str, node_id: str, lease_until: datetime) -> bool:
        """Extend the lease of a task this node is working on; False when this node no
        longer holds it (the task was recovered or taken over: a compare-and-set)."""
        ...

    async def orphans(self, node_id: str | None, now: datetime) -> list[Task]:
        """Planning/in-progress tasks whose lease ran out, plus (unless None) those claimed
        by ``node_id`` — a node's own claims from before its restart."""
        ...

    async def transcript(self, task_id: str, *, after: int = -1,
                         limit: int = 500) -> Page[TranscriptEntry]:
        """Transcript entries of a task with seq > ``after``, oldest first; the cursor is
        the last seq of the page."""
        ...

    async def get_approval(self, approval_id: str) -> Approval | None:
        """One approval request, or None."""
        ...

    async def approval_states(self, ids: Collection[str]) -> dict[str, ApprovalStatus]:
        """The status of each stored request among ``ids``, in one read (an id not stored
        is missing from the answer): what the long polls' shared re-check reads."""
        ...

    async def pending_approvals(self, *, limit: int = 50, cursor: str | None = None
                                ) -> Page[Task]:
        """Tasks waiting for a decision, oldest first (each carries its approval)."""
        ...

    async def pending_requests(self, *, limit: int = 50, cursor: str | None = None
                               ) -> Page[PendingRequest]:
        """Every pending request, of a task or from outside, oldest first (what the API,
        the console and /pending list)."""
        ...

    async def find_request(self, idempotency_key: str) -> Approval | None:
        """The outside request stored under this idempotency key, or None."""
        ...

    async def count_requests(self, policy_id: str, capability: str) -> int:
        """Outside requests of ``policy_id`` for ``capability`` that are pending or
        approved (what a budget counts; denied and expired ones released their unit)."""
        ...

    async def refused_earlier(self, policy_id: str, key: str,
                              since: datetime) -> Approval | None:
        """The newest outside request of ``policy_id`` that a person denied at ``since``
        or later, under refusal key ``key`` (`signoff.runtime.denials`): what makes a
        retried request "denied earlier"."""
        ...

    async def due_approvals(self, now: datetime) -> list[Approval]:
        """Pending approvals whose expires_at has passed."""
        ...

    async def coalesce_leader(self, group_key: str) -> Approval | None:
        """The oldest pending request of group ``group_key`` that has its own card (see
        `signoff.runtime.coalesce`), or None."""
        ...

    async def coalesced(self, leader_id: str) -> list[Approval]:
        """Every request that joined ``leader_id``'s card, whatever its status, oldest
        first."""
        ...

    async def coalesce_strays(self) -> list[Approval]:
        """Pending requests that joined a card whose own request is decided (a crash came
        between the two decisions)."""
        ...

    async def held_approvals(self) -> list[Approval]:
        """Approved requests waiting out their hold (status held), soonest first."""
        ...

    async def grant_candidates(self, key: str) -> list[Grant]:
        """Unrevoked grants stored under ``key``, oldest first; which of them still covers
        an action is `signoff.runtime.policy.grants.covers`, not the store's business."""
        ...

    async def list_grants(self, *, include_revoked: bool = False) -> list[Grant]:
        """All grants."""
        ...

    async def get_grant(self, grant_id: str) -> Grant | None:
        """One grant."""
        ...

    async def audit_events(self, *, task_id: str | None = None, limit: int = 100,
                           cursor: str | None = None) -> Page[AuditEvent]:
        """Audit events in chain order."""
        ...

    async def audit_chain(self, *, after: int = 0, limit: int = 10_000) -> list[AuditEvent]:
        """Raw audit rows in id order, for verification."""
        ...

    async def audit_head(self) -> tuple[int, str]:
        """(number of events, hash of the last one)."""
        ...

    async def signing_keys(self) -> list[PublicKey]:
        """Every listed public key of the nodes' signing keys, oldest first."""
        ...

    async def publish_key(self, key: PublicKey) -> None:
        """List a public key; a key listed already stays as it is."""
        ...

    async def retire_key(self, kid: str, at: datetime) -> bool:
        """Mark a listed key retired at ``at`` (it stays listed); False when unknown."""
        ...

    async def save_card(self, record: CardRecord) -> None:
        """Remember where a card was posted."""
        ...

    async def cards(self, approval_id: str) -> list[CardRecord]:
        """Every posted copy of an approval's card."""
        ...

    async def due_outbox(self, now: datetime, *, limit: int = 50) -> list[OutboxItem]:
        """Undelivered outbox items whose time has come."""
        ...

    async def outbox_done(self, item_id: int, now: datetime) -> None:
        """Mark delivered."""
        ...

    async def outbox_retry(self, item_id: int, *, next_at: datetime, error: str,
                           give_up: bool = False) -> None:
        """Reschedule (or give up on) a failed delivery."""
        ...

    async def beat(self, node: NodeRecord, *, forget_before: datetime) -> None:
        """Insert or refresh a node's registry row; drop rows of nodes whose
        ``live_until`` is before ``forget_before`` (long dead)."""
        ...

    async def leave(self, node_id: str) -> None:
        """Remove a node's registry row (it is shutting down cleanly)."""
        ...

    async def live_nodes(self, now: datetime) -> list[NodeRecord]:
        """Registry rows whose ``live_until`` is after ``now``, by id."""
        ...

    async def mark_undelivered(self, card: UndeliveredCard) -> None:
        """Remember a card given up on a surface (a second mark of it changes nothing)."""
        ...

    async def undelivered(self, *, limit: int = 100) -> list[UndeliveredCard]:
        """Cards marked undelivered, oldest first."""
        ...

    async def forget_undelivered(self, approval_id: str, surface: str) -> None:
        """Drop the mark of one card (decided, or delivered after all)."""
        ...

    async def open_session(self, session: ConsoleSession, *, now: datetime) -> None:
        """Store a new console session; forget the sessions expired by ``now``."""
        ...

    async def console_session(self, session_id: str) -> ConsoleSession | None:
        """A stored console session (expired or not: the caller compares its Clock)."""
        ...

    async def end_session(self, session_id: str) -> None:
        """Forget a console session (signed out); ending it twice changes nothing."""
        ...

    async def add_push_subscription(self, sub: PushSubscription) -> PushSubscription:
        """Keep a push subscription; one whose endpoint is kept already is replaced (the
        browser subscribed again, perhaps as another person): the stored one is returned."""
        ...

    async def push_subscriptions(self, holder: str | None = None) -> list[PushSubscription]:
        """The push subscriptions of ``holder`` (None: everyone's), oldest first."""
        ...

    async def remove_push_subscription(self, sub_id: str, *, holder: str | None = None
                                       ) -> bool:
        """Forget one (only if ``holder``'s, when given); False when there was none."""
        ...

    async def add_passkey(self, passkey: PasskeyRecord) -> None:
        """Store a newly registered passkey (its credential id is unique)."""
        ...

    async def passkeys(self) -> list[PasskeyRecord]:
        """Every passkey, revoked ones included, oldest first."""
        ...

    async def passkey(self, credential_id: str) -> PasskeyRecord | None:
        """The passkey of a credential id, revoked or not."""
        ...

    async def revoke_passkey(self, passkey_id: str, *, at: datetime) -> bool:
        """Revoke a passkey; False when unknown or revoked already."""
        ...

    async def passkey_signed(self, credential_id: str, sign_count: int) -> bool:
        """Move the authenticator's signature counter to ``sign_count`` after an assertion,
        only forward (compare-and-set): False when it is already there or past it (another
        assertion with that counter was accepted meanwhile: a clone racing its original),
        except that an authenticator without a counter (0, and 0 stored) always moves."""
        ...

    async def add_passkey_challenge(self, challenge: PasskeyChallenge, *,
                                    now: datetime) -> None:
        """Store a challenge handed out; forget the ones expired by ``now``."""
        ...

    async def passkey_challenge(self, challenge: str) -> PasskeyChallenge | None:
        """A stored challenge (used or not: the caller checks)."""
        ...

    async def use_passkey_challenge(self, challenge: str, *, at: datetime) -> bool:
        """Mark a challenge used, atomically: True for exactly one caller, and only while it
        is unused and unexpired at ``at`` (a replayed assertion finds it used)."""
        ...
