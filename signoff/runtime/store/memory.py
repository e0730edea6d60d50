"""`TaskStore` in memory, for unit tests and for embedding without a database.

Same semantics as the SQL store (compare-and-set, atomic units of work, the audit
chain), with every record deep-copied in and out so callers cannot change stored state
by accident — the SQL store gives the same guarantee by serializing.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from signoff.errors import Conflict
from signoff.runtime import audit as audit_chain
from signoff.runtime.denials import remembered_refusal
from signoff.runtime.models import (
    Approval,
    ApprovalStatus,
    AuditEvent,
    Grant,
    Task,
    TaskState,
)
from signoff.runtime.signing import PublicKey, Signer
from signoff.runtime.store.port import (
    CardRecord,
    Change,
    ConsoleSession,
    NodeRecord,
    OutboxItem,
    Page,
    PasskeyChallenge,
    PasskeyRecord,
    PendingRequest,
    PushSubscription,
    UndeliveredCard,
)
from signoff.runtime.transcript import TranscriptEntry

ACTIVE = (TaskState.PLANNING, TaskState.IN_PROGRESS)


T = TypeVar("T")

class _Lost(Exception):
    """A compare-and-set lost."""


class MemTaskStore:
    """A complete in-memory `TaskStore`."""

    def __init__(self, *, signer: Signer | None = None) -> None:
        self.sealer = audit_chain.Sealer(signer)
        self._keys: dict[str, PublicKey] = {}
        self._tasks: dict[str, tuple[int, Task]] = {}
        self._seq = itertools.count(1)
        self._approvals: dict[str, Approval] = {}
        self._approval_seq: dict[str, int] = {}  # insertion order: the requests' cursor
        self._request_keys: dict[str, str] = {}  # idempotency key -> approval id
        self._grants: dict[str, tuple[int, Grant]] = {}
        self._by_key: dict[str, list[str]] = {}  # grant key -> grant ids, oldest first
        self._audit: list[AuditEvent] = []
        self._head: tuple[int, str] = (0, audit_chain.GENESIS)
        self._cards: dict[tuple[str, str], CardRecord] = {}
        self._outbox: dict[str, OutboxItem] = {}
        self._outbox_ids = itertools.count(1)
        self._transcripts: dict[str, dict[int, TranscriptEntry]] = {}  # task id -> seq -> entry
        self._nodes: dict[str, NodeRecord] = {}
        self._undelivered: dict[tuple[str, str], UndeliveredCard] = {}
        self._sessions: dict[str, ConsoleSession] = {}
        self._push: dict[str, PushSubscription] = {}
        self._passkeys: dict[str, PasskeyRecord] = {}  # credential id -> passkey
        self._challenges: dict[str, PasskeyChallenge] = {}

    async def open(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""

    async def reset(self) -> dict[str, int]:
        """Forget everything."""
        counts = {"tasks": len(self._tasks), "approvals": len(self._approvals),
                  "grants": len(self._grants), "audit events": len(self._audit),
                  "cards": len(self._cards), "outbox items": len(self._outbox),
                  "transcript entries": sum(len(t) for t in self._transcripts.values()),
                  "undelivered cards": len(self._undelivered)}
        nodes = self._nodes  # the registry describes running daemons, not stored work
        self.__init__(signer=self.sealer.signer)  # type: ignore[misc]
        self._nodes = nodes
        return counts

    async def commit(self, change: Change) -> bool:
        """Check every compare-and-set first, then apply everything (no await between)."""
        try:
            self._check(change)
        except _Lost:
            return False
        self._apply(change)
        return True

    def _check(self, ch: Change) -> None:
        if ch.approval is not None and ch.approval_expect is not None:
            current = self._approvals.get(ch.approval.id)
            if current is None or current.status is not ch.approval_expect:
                raise _Lost
            if ch.approval_votes is not None and len(current.votes) != ch.approval_votes:
                raise _Lost
        if ch.approval is not None and ch.insert_approval and (
                ch.approval.id in self._approvals
                or ch.approval.idempotency_key in self._request_keys):
            raise _Lost
        if ch.outcome_for is not None:
            current = self._approvals.get(ch.outcome_for)
            if current is None or current.outcome is not None:
                raise _Lost
        if ch.task is not None:
            stored = self._tasks.get(ch.task.id)
            if ch.insert:
                if stored is not None or self._schedule_taken(ch.task):
                    raise _Lost
            elif stored is None or stored[1].version != ch.task.version or (
                    ch.expect_state is not None and stored[1].state is not ch.expect_state):
                raise _Lost
        for grant in ch.grants:
            if grant.id in self._grants:
                raise _Lost
        keys = [(e.task_id, e.seq) for e in ch.transcript]
        if len(set(keys)) != len(keys) or any(
                seq in self._transcripts.get(task_id, {}) for task_id, seq in keys):
            raise _Lost

    def _schedule_taken(self, task: Task) -> bool:
        if task.schedule is None or task.fire_time is None:
            return False
        return any(t.schedule == task.schedule and t.fire_time == task.fire_time
                   for _, t in self._tasks.values())

    def _apply(self, ch: Change) -> None:
        if ch.approval is not None:
            ap = ch.approval
            self._approval_seq.setdefault(ap.id, len(self._approval_seq) + 1)
            if ap.idempotency_key is not None:
                self._request_keys.setdefault(ap.idempotency_key, ap.id)
            self._approvals[ap.id] = ap.model_copy(deep=True)
        if ch.task is not None:
            seq = next(self._seq) if ch.insert else self._tasks[ch.task.id][0]
            if not ch.insert:
                ch.task.version += 1
            self._tasks[ch.task.id] = (seq, ch.task.model_copy(deep=True))
        for grant in ch.grants:
            self._grants[grant.id] = (len(self._grants), grant.model_copy(deep=True))
            self._by_key.setdefault(grant.key, []).append(grant.id)
        for grant_id in ch.grant_revokes:
            if grant_id in self._grants:
                g = self._grants[grant_id][1]
                g.revoked_at = g.revoked_at or ch.at
        for item in self._outbox.values():
            if item.id in ch.outbox_done:
                item.done_at, item.error = ch.at, None
        for item in ch.outbox:
            if item.key not in self._outbox:
                stored = OutboxItem(**{**item.__dict__, "id": next(self._outbox_ids),
                                       "next_at": item.next_at or ch.at})
                self._outbox[item.key] = stored
        for entry in ch.transcript:
            entry.at = entry.at or ch.at
            self._transcripts.setdefault(entry.task_id, {})[entry.seq] = entry.model_copy(
                deep=True)
        if ch.audit:
            count, prev = self._head
            sealed, fresh = self.sealer.seal(ch.audit, count=count, prev=prev, at=ch.at)
            for key in fresh:
                self._keys.setdefault(key.kid, key)
            self._audit.extend(sealed)
            self._head = (sealed[-1].id, sealed[-1].hash)
            self.sealer.committed(sealed)
            ch.audit[:] = sealed

    def _copy(self, task: Task) -> Task:
        return task.model_copy(deep=True)

    async def get_task(self, task_id: str) -> Task | None:
        """One task."""
        found = self._tasks.get(task_id)
        return self._copy(found[1]) if found else None

    def _sorted(self) -> list[tuple[int, Task]]:
        return sorted(self._tasks.values(), key=lambda st: st[0])

    async def list_tasks(self, *, state: TaskState | None = None, limit: int = 50,
                         cursor: str | None = None, schedule: str | None = None) -> Page[Task]:
        """Newest first."""
        rows = [(s, t) for s, t in reversed(self._sorted())
                if (state is None or t.state is state)
                and (schedule is None or t.schedule == schedule)
                and (cursor is None or s < int(cursor))]
        return _page(rows, limit, self._copy)

    async def count_by_state(self, states: Collection[TaskState] | None = None
                             ) -> dict[str, int]:
        """Tasks per state (only ``states``, when given)."""
        counts: dict[str, int] = {}
        for _, t in self._tasks.values():
            if states is None or t.state in states:
                counts[t.state.value] = counts.get(t.state.value, 0) + 1
        return counts

    async def claim_next(self, node_id: str, lease_until: datetime) -> Task | None:
        """Oldest queued task."""
        for _, task in self._sorted():
            # A queued task's claimed_by names the only node that may take it.
            if task.state is TaskState.QUEUED and task.claimed_by in (None, node_id):
                return self._take(task, node_id, lease_until)
        return None

    async def claim(self, task_id: str, node_id: str, lease_until: datetime,
                    from_state: TaskState) -> Task | None:
        """One task in from_state."""
        found = self._tasks.get(task_id)
        if found is None or found[1].state is not from_state:
            return None
        return self._take(found[1], node_id, lease_until)

    def _take(self, task: Task, node_id: str, lease_until: datetime) -> Task:
        task.state = TaskState.PLANNING if task.steps is None else TaskState.IN_PROGRESS
        task.claimed_by, task.lease_until = node_id, lease_until
        task.version += 1
        return self._copy(task)

    async def renew_lease(self, task_id: str, node_id: str, lease_until: datetime) -> bool:
        """Extend a lease this node still holds."""
        found = self._tasks.get(task_id)
        if found and found[1].claimed_by == node_id:
            found[1].lease_until = lease_until
            return True
        return False

    async def orphans(self, node_id: str | None, now: datetime) -> list[Task]:
        """Active tasks of a dead worker."""
        return [self._copy(t) for _, t in self._sorted() if t.state in ACTIVE and (
            (node_id is not None and t.claimed_by == node_id)
            or t.lease_until is None or t.lease_until < now)]

    async def transcript(self, task_id: str, *, after: int = -1,
                         limit: int = 500) -> Page[TranscriptEntry]:
        """Entries after a seq, oldest first."""
        entries = self._transcripts.get(task_id, {})
        rows = [(seq, entries[seq]) for seq in sorted(entries) if seq > after]
        return _page(rows, limit, lambda e: e.model_copy(deep=True))

    async def get_approval(self, approval_id: str) -> Approval | None:
        """One approval."""
        found = self._approvals.get(approval_id)
        return found.model_copy(deep=True) if found else None

    async def approval_states(self, ids: Collection[str]) -> dict[str, ApprovalStatus]:
        """The status of each stored request among ``ids``."""
        return {i: self._approvals[i].status for i in ids if i in self._approvals}

    async def pending_approvals(self, *, limit: int = 50, cursor: str | None = None
                                ) -> Page[Task]:
        """Waiting tasks, oldest first."""
        rows = [(s, t) for s, t in self._sorted() if t.state is TaskState.WAITING_APPROVAL
                and (cursor is None or s > int(cursor))]
        return _page(rows, limit, self._copy)

    async def pending_requests(self, *, limit: int = 50, cursor: str | None = None
                               ) -> Page[PendingRequest]:
        """Pending requests of tasks and from outside, oldest first."""
        rows = []
        for approval_id, seq in self._approval_seq.items():
            ap = self._approvals[approval_id]
            if ap.status is not ApprovalStatus.PENDING or (cursor and seq <= int(cursor)):
                continue
            task = None
            if ap.task_id is not None:
                found = self._tasks.get(ap.task_id)
                task = found[1] if found else None
                if task is None or task.approval is None or task.approval.id != ap.id:
                    continue  # a stale request of a task that moved on
            rows.append((seq, PendingRequest(ap.model_copy(deep=True),
                                             self._copy(task) if task else None)))
        return _page(rows, limit, lambda r: r)

    async def find_request(self, idempotency_key: str) -> Approval | None:
        """The request stored under an idempotency key."""
        approval_id = self._request_keys.get(idempotency_key)
        return await self.get_approval(approval_id) if approval_id else None

    async def count_requests(self, policy_id: str, capability: str) -> int:
        """Pending or approved outside requests of a policy_id for a capability."""
        live = (ApprovalStatus.PENDING, ApprovalStatus.HELD, ApprovalStatus.APPROVED)
        return sum(1 for a in self._approvals.values()
                   if a.task_id is None and a.policy_id == policy_id
                   and a.action.capability == capability and a.status in live)

    async def refused_earlier(self, policy_id: str, key: str,
                              since: datetime) -> Approval | None:
        """The newest person's deny since ``since`` of a request with this refusal key."""
        found = [a for a in self._approvals.values()
                 if a.policy_id == policy_id and remembered_refusal(a) == key
                 and a.decided_at is not None and a.decided_at >= since]
        newest = max(found, key=lambda a: a.decided_at or since, default=None)
        return newest.model_copy(deep=True) if newest is not None else None

    async def held_approvals(self) -> list[Approval]:
        """Requests in their hold, soonest release first."""
        held = [a.model_copy(deep=True) for a in self._approvals.values()
                if a.status is ApprovalStatus.HELD]
        return sorted(held, key=lambda a: (a.hold_until or a.requested_at))

    async def due_approvals(self, now: datetime) -> list[Approval]:
        """Expired pending approvals."""
        return [a.model_copy(deep=True) for a in self._approvals.values()
                if a.status is ApprovalStatus.PENDING and a.expires_at <= now]

    def _in_order(self) -> list[Approval]:
        return sorted(self._approvals.values(), key=lambda a: self._approval_seq[a.id])

    async def coalesce_leader(self, group_key: str) -> Approval | None:
        """The oldest pending request of the group that has its own card."""
        found = (a for a in self._in_order() if a.coalesce_key == group_key
                 and a.coalesced_into is None and a.status is ApprovalStatus.PENDING)
        first = next(found, None)
        return first.model_copy(deep=True) if first else None

    async def coalesced(self, leader_id: str) -> list[Approval]:
        """Requests that joined ``leader_id``'s card, oldest first."""
        return [a.model_copy(deep=True) for a in self._in_order()
                if a.coalesce_key is not None and a.coalesced_into == leader_id]

    async def coalesce_strays(self) -> list[Approval]:
        """Pending requests whose card's request is decided."""
        def stray(a: Approval) -> bool:
            lead = self._approvals.get(a.coalesced_into or "")
            return lead is not None and lead.status is not ApprovalStatus.PENDING
        return [a.model_copy(deep=True) for a in self._in_order()
                if a.coalesce_key is not None and a.status is ApprovalStatus.PENDING
                and stray(a)]

    async def grant_candidates(self, key: str) -> list[Grant]:
        """Unrevoked grants under ``key`` (indexed by key: this runs for every action)."""
        found = (self._grants[grant_id][1] for grant_id in self._by_key.get(key, ()))
        # A Grant holds only immutable values: a shallow copy cannot leak stored state.
        return [g.model_copy() for g in found if g.revoked_at is None]

    async def list_grants(self, *, include_revoked: bool = False) -> list[Grant]:
        """All grants."""
        return [g.model_copy(deep=True) for _, g in sorted(self._grants.values(),
                                                           key=lambda x: x[0])
                if include_revoked or g.revoked_at is None]

    async def get_grant(self, grant_id: str) -> Grant | None:
        """One grant."""
        found = self._grants.get(grant_id)
        return found[1].model_copy(deep=True) if found else None

    async def audit_events(self, *, task_id: str | None = None, limit: int = 100,
                           cursor: str | None = None) -> Page[AuditEvent]:
        """Events in chain order."""
        rows = [(e.id, e) for e in self._audit
                if (task_id is None or e.task_id == task_id)
                and (cursor is None or e.id > int(cursor))]
        return _page(rows, limit, lambda e: e)

    async def audit_chain(self, *, after: int = 0, limit: int = 10_000) -> list[AuditEvent]:
        """Raw events after an id."""
        return [e for e in self._audit if e.id > after][:limit]

    async def audit_head(self) -> tuple[int, str]:
        """(count, head hash)."""
        return self._head

    async def signing_keys(self) -> list[PublicKey]:
        """Every listed key, oldest first."""
        return sorted(self._keys.values(), key=lambda k: (k.created_at, k.kid))

    async def publish_key(self, key: PublicKey) -> None:
        """List a key (kept as it is when listed already)."""
        self._keys.setdefault(key.kid, key)

    async def retire_key(self, kid: str, at: datetime) -> bool:
        """Mark a listed key retired."""
        key = self._keys.get(kid)
        if key is None:
            return False
        if key.retired_at is None:
            self._keys[kid] = dataclasses.replace(key, retired_at=at)
        return True

    async def save_card(self, record: CardRecord) -> None:
        """Remember a posted card."""
        self._cards.setdefault((record.approval_id, record.surface), record)

    async def cards(self, approval_id: str) -> list[CardRecord]:
        """Copies of a card."""
        return [c for (a, _), c in self._cards.items() if a == approval_id]

    async def due_outbox(self, now: datetime, *, limit: int = 50) -> list[OutboxItem]:
        """Items to deliver now."""
        due = [i for i in self._outbox.values()
               if i.done_at is None and (i.next_at is None or i.next_at <= now)]
        return [OutboxItem(**i.__dict__) for i in sorted(due, key=lambda i: i.id)[:limit]]

    async def outbox_done(self, item_id: int, now: datetime) -> None:
        """Delivered."""
        for item in self._outbox.values():
            if item.id == item_id:
                item.done_at, item.error = now, None

    async def outbox_retry(self, item_id: int, *, next_at: datetime, error: str,
                           give_up: bool = False) -> None:
        """Try again later (or never)."""
        for item in self._outbox.values():
            if item.id == item_id:
                item.attempts += 1
                item.next_at, item.error = next_at, error
                if give_up:
                    item.done_at = next_at

    # -- undelivered cards ------------------------------------------------------------
    async def mark_undelivered(self, card: UndeliveredCard) -> None:
        """Remember a card given up on a surface (the first mark stays)."""
        self._undelivered.setdefault((card.approval_id, card.surface), card)

    async def undelivered(self, *, limit: int = 100) -> list[UndeliveredCard]:
        """Cards marked undelivered, oldest first."""
        cards = sorted(self._undelivered.values(), key=lambda c: (c.since, c.approval_id))
        return cards[:limit]

    async def forget_undelivered(self, approval_id: str, surface: str) -> None:
        """Drop one card's mark."""
        self._undelivered.pop((approval_id, surface), None)

    # -- console sessions ---------------------------------------------------------------
    async def open_session(self, session: ConsoleSession, *, now: datetime) -> None:
        """Store a session; forget the expired ones."""
        for gone in [k for k, v in self._sessions.items() if v.expires_at <= now]:
            del self._sessions[gone]
        self._sessions[session.id] = session

    async def console_session(self, session_id: str) -> ConsoleSession | None:
        """A stored session."""
        return self._sessions.get(session_id)

    async def end_session(self, session_id: str) -> None:
        """Forget a session."""
        self._sessions.pop(session_id, None)

    # -- push subscriptions -------------------------------------------------------------
    async def add_push_subscription(self, sub: PushSubscription) -> PushSubscription:
        """Keep one; the same endpoint again replaces the old."""
        for old in [k for k, v in self._push.items() if v.endpoint == sub.endpoint]:
            del self._push[old]
        self._push[sub.id] = sub
        return sub

    async def push_subscriptions(self, holder: str | None = None) -> list[PushSubscription]:
        """Oldest first, ``holder``'s or everyone's."""
        return [s for s in self._push.values() if holder is None or s.holder == holder]

    async def remove_push_subscription(self, sub_id: str, *, holder: str | None = None
                                       ) -> bool:
        """Forget one (``holder``'s only, when given)."""
        found = self._push.get(sub_id)
        if found is None or (holder is not None and found.holder != holder):
            return False
        del self._push[sub_id]
        return True

    # -- passkeys ------------------------------------------------------------------------
    async def add_passkey(self, passkey: PasskeyRecord) -> None:
        """Store a passkey."""
        if passkey.credential_id in self._passkeys:
            raise Conflict(f"passkey credential {passkey.credential_id} is registered")
        self._passkeys[passkey.credential_id] = passkey

    async def passkeys(self) -> list[PasskeyRecord]:
        """Every passkey, oldest first."""
        return sorted(self._passkeys.values(), key=lambda p: (p.created_at, p.id))

    async def passkey(self, credential_id: str) -> PasskeyRecord | None:
        """One passkey by credential id."""
        return self._passkeys.get(credential_id)

    async def revoke_passkey(self, passkey_id: str, *, at: datetime) -> bool:
        """Revoke one passkey."""
        for key, found in self._passkeys.items():
            if found.id == passkey_id and found.revoked_at is None:
                self._passkeys[key] = replace(found, revoked_at=at)
                return True
        return False

    async def passkey_signed(self, credential_id: str, sign_count: int) -> bool:
        """Move the signature counter forward (see the port)."""
        found = self._passkeys.get(credential_id)
        if found is None or not (found.sign_count < sign_count
                                 or sign_count == found.sign_count == 0):
            return False
        self._passkeys[credential_id] = replace(found, sign_count=sign_count)
        return True

    async def add_passkey_challenge(self, challenge: PasskeyChallenge, *,
                                    now: datetime) -> None:
        """Store a challenge; forget the expired."""
        for gone in [k for k, v in self._challenges.items() if v.expires_at <= now]:
            del self._challenges[gone]
        self._challenges[challenge.challenge] = challenge

    async def passkey_challenge(self, challenge: str) -> PasskeyChallenge | None:
        """One challenge."""
        return self._challenges.get(challenge)

    async def use_passkey_challenge(self, challenge: str, *, at: datetime) -> bool:
        """Use a challenge once."""
        found = self._challenges.get(challenge)
        if found is None or found.used_at is not None or found.expires_at <= at:
            return False
        self._challenges[challenge] = replace(found, used_at=at)
        return True

    # -- node registry ----------------------------------------------------------------
    async def beat(self, node: NodeRecord, *, forget_before: datetime) -> None:
        """Refresh a node's row; forget the long dead."""
        self._nodes[node.id] = node
        for dead in [n.id for n in self._nodes.values() if n.live_until < forget_before]:
            del self._nodes[dead]

    async def leave(self, node_id: str) -> None:
        """Drop a node's row."""
        self._nodes.pop(node_id, None)

    async def live_nodes(self, now: datetime) -> list[NodeRecord]:
        """Rows still live at ``now``."""
        return sorted((n for n in self._nodes.values() if n.live_until > now),
                      key=lambda n: n.id)


def _page(rows: Sequence[tuple[int, T]], limit: int, copy: Callable[[T], T]) -> Page[T]:
    more = len(rows) > limit
    rows = rows[:limit]
    return Page([copy(r) for _, r in rows], str(rows[-1][0]) if more else None)
