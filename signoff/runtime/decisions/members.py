"""Requests that share one card (`signoff.runtime.coalesce`): the card's answer given to
each of its members, each with its own compare-and-set, task move, grant (under its own
policy_id) and audit event; a member that answer cannot decide gets a card of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from signoff.runtime import coalesce
from signoff.runtime.decisions.answer import (
    Answer,
    Move,
    Outcome,
    Rules,
    answer,
    not_waiting,
    requester_of,
    self_forbidden,
)
from signoff.runtime.decisions.expiry import Expiry
from signoff.runtime.decisions.settle import Settler
from signoff.runtime.models import Approval, ApprovalStatus, Scope, Task, Vote
from signoff.runtime.store.port import Change

log = logging.getLogger(__name__)

Commit = Callable[[Task | None, Outcome], Awaitable[bool]]


class Members:
    """The members of a shared card; ``commit`` and ``rules`` are the decider's."""

    def __init__(self, settler: Settler, expiry: Expiry, commit: Commit,
                 rules: Callable[[Approval], Rules]) -> None:
        self.settler = settler
        self.expiry = expiry
        self._commit = commit
        self._rules = rules

    async def shared(self, approval: Approval) -> bool:
        """True when pending identical requests share this request's card."""
        if approval.coalesce_key is None or not coalesce.has_own_card(approval):
            return False
        return any(m.status is ApprovalStatus.PENDING
                   for m in await self.settler.store.coalesced(approval.id))

    async def decide(self, leader: Approval, channel: str | None) -> None:
        """Give the leader's committed answer to every pending request sharing its card."""
        for member in await self.settler.store.coalesced(leader.id):
            if coalesce.follows(leader, member):
                await self._follow(leader, member, channel)
            elif (coalesce.edited_approval(leader) and leader.status.final
                  and member.status is ApprovalStatus.PENDING):
                await self.detach(member)

    async def _follow(self, leader: Approval, member: Approval, channel: str | None) -> None:
        """One member takes the leader's decision: its own compare-and-set, task move,
        grant (under its own policy_id) and audit event, with the leader's decider. An
        approval counts for it only by the votes of people other than its own requester,
        against its own quorum; short of that it gets a card of its own."""
        if leader.status is ApprovalStatus.EXPIRED:
            await self.expiry.expire(member)
            return
        scope, actor = leader.scope or Scope.DENY, leader.decided_by or "?"
        for _ in range(5):
            task = await self.settler.store.get_task(member.task_id) if member.task_id else None
            if not_waiting(task, member) is not None:
                return  # the task moved on; nothing of it is pending here
            counted = self._votes_for(task, member, leader) if scope.approves else None
            if counted is not None and len(counted) < member.needed:
                await self.detach(member)  # its requester's vote cannot decide it
                return
            given = Answer(scope=scope, actor=actor, reason=leader.reason, channel=channel,
                           lasts=leader.grant_lasts, in_group=True,
                           counted=counted if member.needed > 1 else None)
            outcome = answer(member, task, given, self._rules(member), self.settler.now())
            if outcome.move is not Move.NONE and await self._commit(task, outcome):
                return
            current = await self.settler.store.get_approval(member.id)
            if current is None or current.status is not ApprovalStatus.PENDING:
                return  # decided by its own id meanwhile
            member = current

    def _votes_for(self, task: Task | None, member: Approval, leader: Approval) -> list[Vote]:
        """The approvals of the shared card (and of the member itself) that count for
        ``member``: one per person, its own requester's left out when self-approval is
        refused for it."""
        given = leader.votes or [Vote(actor=leader.decided_by or "?",
                                      scope=leader.scope or Scope.ONCE,
                                      at=leader.decided_at or self.settler.now())]
        people = self.settler.engine.config.people
        requester = requester_of(task, member)
        forbidden = self_forbidden(member, self._rules(member))
        votes = [v for v in [*member.votes, *given]
                 if not (forbidden and people.same(requester, v.actor))]
        first: dict[str, Vote] = {}
        for vote in votes:
            first.setdefault(vote.actor, vote)
        return [first[a] for a in people.distinct(first)]

    async def detach(self, member: Approval) -> None:
        """Give a member a card of its own (it leaves the group, still pending)."""
        own = member.model_copy(update={"coalesced_into": None})
        change = Change(at=self.settler.now(), approval=own, approval_expect=ApprovalStatus.PENDING,
                        outbox=[coalesce.left_event(member),
                                coalesce.card_event(own, mentions=list(own.approvers))])
        if await self.settler.commit(change):
            log.info("coalesced_request_detached", extra={"approval_id": member.id,
                                                          "leader": member.coalesced_into})
            task = await self.settler.store.get_task(own.task_id) if own.task_id else None
            await self.settler.engine.listener.approval_requested(task, own)

    async def settle_strays(self) -> int:
        """Decide the members a crash (or a race with another node) left pending under a
        decided card, as its decision did; one that asked after that decision gets a card
        of its own. Returns how many were looked at."""
        strays = await self.settler.store.coalesce_strays()
        for member in strays:
            leader = await self.settler.store.get_approval(member.coalesced_into or "")
            if leader is not None and leader.status is ApprovalStatus.HELD:
                continue  # released or undone later: its members take that final answer
            if leader is not None and coalesce.follows(leader, member):
                await self._follow(leader, member, None)
            else:
                await self.detach(member)
        return len(strays)

