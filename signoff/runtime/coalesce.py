"""Coalescing: identical pending requests share one card, and one answer decides them all.

With ``approvals.coalesce`` on, a new request is put in a group by what it asks (the same
tool, capability, risk, fingerprint *and content*, and the tool's description as its
server gave it — whatever its task or policy id —
asked of the same approvers). Content matters as much as the target: the card shows the
leader's payload, body or text, and one answer sends every member's, so two requests that
differ only in what they would say never share a card. The oldest pending request of a
group (the *leader*) has the card; a later one *joins* it while it is pending: it is
stored with ``coalesced_into`` = the leader's id, gets no card of its own, and the
leader's card is edited to show the count ("3 identical requests"). Its expiry becomes
the leader's when that comes first, so the group ends together and nobody is left
pending without a card.

The answer is taken on the leader (by `Decider.decide`, like any answer, so a quorum's
partial approvals live on the leader too); the decider then gives the same answer to
each pending member, one compare-and-set each, each audited as that request's own
decision, and a session or always answer makes each member's own grant under its own
policy_id. A member decided directly (by its own id) leaves the group. A member follows
an approval only on the votes of people other than its own requester, counted against
its own quorum (`Decider._follow`); short of that it gets a card of its own.

Durable by construction: the membership is stored with each request, so after a crash
between the leader's decision and its members' the daemon's sweep (`strays`) finds the
members left pending and decides them the same way; a request that joined a card just
as it was being decided (a race between two nodes) is given a card of its own instead.
This module holds the rules; `decisions.py` stays the one writer of decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator

from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.events import ApprovalEvent, approval_event
from signoff.runtime.models import Approval, ApprovalStatus
from signoff.runtime.store.port import OutboxItem, TaskStore


def group_key(approval: Approval) -> str:
    """What makes two requests identical: the action as a grant sees it (tool,
    capability, risk, fingerprint), everything it would do — every argument, content
    included, canonicalised, and which of them are content (what the card shows) — its
    summary, what its server says the tool does and whether it reaches a private network
    (the leader's card must say all the member's would: a member whose server described
    the tool otherwise was never shown that), and who is asked (an answer must be theirs
    to give)."""
    action = approval.action
    fields = [action.tool, action.capability or "", action.risk.value if action.risk else "",
              action.fingerprint or "", action.args, sorted(action.content),
              sorted(approval.approvers), action.summary or "", action.private_network,
              action.description or ""]
    try:
        return sha256_hex(canonical_json(fields))
    except (TypeError, ValueError):
        # Args with no one JSON spelling (NaN) cannot be compared: a card of its own.
        return sha256_hex(canonical_json(["unique", approval.id]))


class GroupLocks:
    """One lock per group on this node: looking for the leader and storing the new request
    happen under it, so two identical requests made at the same moment never both become
    leaders (two cards). Across nodes the same race can still give a second card (each
    node's first request leads); it decides its own requests and nothing is lost."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary())

    @contextlib.asynccontextmanager
    async def hold(self, approval: Approval) -> AsyncIterator[None]:
        """Hold the lock of ``approval``'s group."""
        key = group_key(approval)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            yield


async def join(store: TaskStore, approval: Approval) -> Approval:
    """``approval`` placed in its group: joined to the pending leader's card if there is
    one (expiring no later than the leader), else the group's new leader."""
    key = group_key(approval)
    leader = await store.coalesce_leader(key)
    if leader is None or leader.id == approval.id:
        return approval.model_copy(update={"coalesce_key": key, "coalesced_into": None})
    return approval.model_copy(update={
        "coalesce_key": key, "coalesced_into": leader.id,
        "expires_at": min(approval.expires_at, leader.expires_at)})


def card_event(approval: Approval, *, mentions: list[str] | None = None) -> OutboxItem:
    """The outbox row a new request writes with itself: its own card (REQUESTED, with the
    people to alert), or, for a member, an edit of the leader's card to show the new
    count (GROUPED)."""
    if approval.coalesced_into is None:
        if mentions is None:
            return approval_event(ApprovalEvent.REQUESTED, approval.id)
        return approval_event(ApprovalEvent.REQUESTED, approval.id, mentions=mentions)
    return approval_event(ApprovalEvent.GROUPED, approval.coalesced_into,
                          suffix=f":{approval.id}", member=approval.id)


def left_event(member: Approval) -> OutboxItem:
    """The edit of the shared card when ``member`` leaves it (decided by its own id, or
    given a card of its own)."""
    assert member.coalesced_into is not None
    return approval_event(ApprovalEvent.GROUPED, member.coalesced_into,
                          suffix=f":{member.id}:left", member=member.id)


def has_own_card(approval: Approval) -> bool:
    """False for a member of a group: its leader's card speaks for it."""
    return approval.coalesced_into is None


def follows(leader: Approval, member: Approval) -> bool:
    """True when ``member`` takes ``leader``'s decision: it was asked before that
    decision was made (a request that came after never was on the card people saw)."""
    # A held leader (its undo window) may still be undone: members wait for its release
    # (the sweep then gives them the final answer) and are never left to run early.
    if not leader.status.final or member.status is not ApprovalStatus.PENDING:
        return False
    if not same_content(leader, member):
        return False  # grouped under an older key (before 0.3): the card never showed it
    if leader.status is ApprovalStatus.WITHDRAWN:  # its asker gave up, not the members'
        return False
    if edited_approval(leader):
        return False  # approved with other args than the member asks (`edited_approval`)
    return leader.decided_at is None or member.requested_at <= leader.decided_at


def edited_approval(leader: Approval) -> bool:
    """True when ``leader`` was approved with edited args. An edit is refused on a card
    others share, but a request joining between that check and the commit would take an
    approval of args it does not ask, and run its own: it gets a card of its own."""
    return leader.original_action is not None and leader.status in (
        ApprovalStatus.APPROVED, ApprovalStatus.HELD)


def same_content(leader: Approval, member: Approval) -> bool:
    """True when ``member`` asks exactly what ``leader``'s card showed (as asked, before
    any edit): the same arguments, content included."""
    shown = leader.original_action or leader.action
    return (shown.tool, shown.args, sorted(shown.content)) == (
        member.action.tool, member.action.args, sorted(member.action.content))


def group_size(leader: Approval, members: list[Approval]) -> int:
    """How many requests the leader's card stands for: itself, its pending members, and
    (once decided) the members its decision decided."""
    def counted(member: Approval) -> bool:
        if member.status is ApprovalStatus.PENDING:
            return leader.status is ApprovalStatus.PENDING
        if leader.status is ApprovalStatus.EXPIRED:  # a group expires together, in any order
            return member.status is ApprovalStatus.EXPIRED
        return (member.status is leader.status and member.decided_by == leader.decided_by
                and member.decided_at is not None and leader.decided_at is not None
                and member.decided_at >= leader.decided_at)
    return 1 + sum(1 for m in members if counted(m))
