"""Applying answers: a person's decision, an expiry, a refused attempt, a revoked grant.

Every decision is a compare-and-set on the approval request (pending → decided) in the
same transaction as the task's state change, the grant it creates and its audit event,
so on any backend and any number of nodes the first answer wins and the action runs
once. Who may decide is the bot layer's question; this module checks what the request
itself allows (scopes, expiry, the self-approval rule). Every path that decides — API
route, batch, chat click, e-mail link, CLI — ends here, so the self-approval rule and the
quorum compare *people* (`signoff.runtime.people`) in this one place: an outside request
is never approved by whoever asked it, from any of their accounts.

A request under a quorum (`Approval.needed` > 1) collects approvals (`Approval.votes`)
while it stays pending; each is its own compare-and-set on the request's status *and*
vote count, so racing approvals from two surfaces or nodes never lose one; the approval
that reaches the quorum decides (with the narrowest scope among them), one deny denies.
With a hold (`approvals.hold`), the approval that decides parks the request as ``held``
until `Approval.hold_until`; `release_due` (the daemon's sweep) lets it run then, `undo`
denies it before (both in `signoff.runtime.decisions.hold`).

A request from an agent that is not ours has no task: the same decision is committed
without a task to move (its grant lives under the request's own policy_id), and waiters
on `watch` (long polls) are woken once it is committed.

A request that shares its card with identical ones (`signoff.runtime.coalesce`) is
decided like any other; the same answer is then given to each of its members, each
with its own compare-and-set, task move, grant and audit event (`_decide_members`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from signoff.errors import Conflict
from signoff.runtime import coalesce
from signoff.runtime.decisions.hold import HoldDecisions
from signoff.runtime.decisions.settle import DecisionResult, Runnable
from signoff.runtime.edits import EditRefused, prepare_edit
from signoff.runtime.events import ApprovalEvent, TaskEvent, approval_event, audit_event
from signoff.runtime.models import (
    Action,
    Approval,
    ApprovalStatus,
    DecisionCode,
    Grant,
    JsonDict,
    Scope,
    Task,
    TaskState,
    Vote,
)
from signoff.runtime.policy.grants import grant_for
from signoff.runtime.policy.quorum import narrowest
from signoff.runtime.store.port import Change
from signoff.runtime.words import (
    ALREADY_DECIDED,
    SCOPE_WORDS,
    WITHDRAWN,
    at_hhmm,
    held_words,
    progress,
    refusal_reason,
)

log = logging.getLogger(__name__)

__all__ = ["Decider", "DecisionResult", "Runnable"]


def _more(approval: Approval) -> str:
    missing = approval.needed - len(approval.votes)
    return "one more" if missing == 1 else f"{missing} more"


def _already(approval: Approval) -> DecisionResult:
    if approval.status is ApprovalStatus.EXPIRED:
        return DecisionResult(False, DecisionCode.EXPIRED,
                              "Expired — the request timed out and was denied", approval=approval)
    done = WITHDRAWN if approval.status is ApprovalStatus.WITHDRAWN else ALREADY_DECIDED
    return DecisionResult(False, DecisionCode.ALREADY_DECIDED,
                          f"{done} by {approval.decided_by} at {at_hhmm(approval.decided_at)}",
                          approval=approval)


def requester_of(task: Task | None, approval: Approval) -> str | None:
    """Who asked: the API caller of an outside request, else the task's submitter."""
    return approval.submitted_by or (task.submitted_by if task else None)


def _not_waiting(task: Task | None, approval: Approval) -> DecisionResult | None:
    """The refusal when ``approval`` belongs to a task that no longer waits for it."""
    if approval.task_id is None or (
            task is not None and task.state is TaskState.WAITING_APPROVAL
            and task.approval is not None and task.approval.id == approval.id):
        return None
    state = task.state.value if task else "missing"
    return DecisionResult(False, DecisionCode.NOT_WAITING, f"The task is {state}, not waiting",
                          task=task, approval=approval)


class Decider(HoldDecisions):
    """Turns answers into committed state changes."""

    async def decide(self, approval_id: str, scope: Scope, actor: str, *,
                     reason: str | None = None, channel: str | None = None,
                     lasts: timedelta | None = None, args: JsonDict | None = None,
                     passkey: JsonDict | None = None) -> DecisionResult:
        """Apply one answer; exactly one of any number of racing answers is accepted.

        ``lasts``: a session or always grant lapses that long after the decision
        (``"for": "30m"``). ``args``: approve these edited args instead (`runtime.edits`).
        ``passkey``: the assertion that confirmed this answer, kept in its audit event
        (checked by the bot layer before, `signoff.runtime.passkeys`).
        """
        approval = await self.store.get_approval(approval_id)
        if approval is None:
            await self.refuse(approval_id, actor, "unknown approval request", channel=channel)
            return DecisionResult(False, DecisionCode.UNKNOWN, "Unknown or expired request")
        if approval.status is not ApprovalStatus.PENDING:
            await self.refuse(approval_id, actor, "too late: already decided", channel=channel)
            return _already(approval)
        if scope not in approval.allowed_scopes:
            await self.refuse(approval_id, actor, f"scope {scope.value} is not allowed",
                              channel=channel)
            allowed = ", ".join(s.value for s in approval.allowed_scopes)
            return DecisionResult(False, DecisionCode.SCOPE_NOT_ALLOWED,
                                  f"'{scope.value}' is not offered for this action "
                                  f"(allowed: {allowed})", approval=approval)
        answer = await self._answer_terms(approval, scope, actor, lasts, args, channel)
        if isinstance(answer, DecisionResult):
            return answer
        edited, lasts = answer
        # A lost compare-and-set while the request is still pending means the task row
        # changed under us (an escalation added approvers, another approval of a quorum
        # was counted): read it again and retry, once more per approval a quorum needs.
        for _ in range(5 + approval.needed):
            task = await self.store.get_task(approval.task_id) if approval.task_id else None
            refused = self._check(task, approval, scope, actor)
            if refused is not None and refused.code is DecisionCode.NOT_AUTHORIZED:
                await self.refuse(approval_id, actor, "self-approval is forbidden",
                                  channel=channel, task=task)
                return refused
            if refused is not None and refused.code is DecisionCode.ALREADY_COUNTED:
                await self.refuse(approval_id, actor, "already approved by this person",
                                  channel=channel, task=task)
                return refused
            result = None
            if refused is None:
                if scope.approves and len(approval.votes) + 1 < approval.needed:
                    result = await self._vote(task, approval, scope, actor, channel, lasts,
                                              passkey)
                else:
                    result = await self._apply(task, approval, scope, actor, reason, channel,
                                               lasts=lasts, edited=edited, passkey=passkey)
                if result is not None:
                    if result.approval is not None and approval.coalesce_key is not None:
                        await self._decide_members(result.approval, channel)
                    return result
            # Lost, or the task moved on: if someone decided meanwhile, say who.
            current = await self.store.get_approval(approval.id)
            if current is None or current.status is not ApprovalStatus.PENDING:
                await self.refuse(approval.id, actor, "too late: already decided",
                                  channel=channel)
                return _already(current or approval)
            if refused is not None:
                return refused
            approval = current
        return DecisionResult(False, DecisionCode.NOT_WAITING, "The task keeps changing; try again")

    def _lasts(self, scope: Scope, asked: timedelta | None) -> timedelta | None:
        """How long the grant of this answer lasts: as asked, else approvals.grant_ttl for
        an always grant; None: as long as its scope."""
        if asked is not None or scope is not Scope.ALWAYS:
            return asked
        return self.engine.config.grant_ttl

    async def _answer_terms(self, approval: Approval, scope: Scope, actor: str,
                            lasts: timedelta | None, args: JsonDict | None,
                            channel: str | None
                            ) -> tuple[Action | None, timedelta | None] | DecisionResult:
        """The edited action (None: not edited) and the grant's lifetime of an answer, or
        the refusal (audited) of terms that do not fit it; nothing is decided then."""
        refusal: tuple[DecisionCode, str] | None = None
        edited = None
        if lasts is not None and scope not in (Scope.SESSION, Scope.ALWAYS):
            refusal = (DecisionCode.INVALID, f"for: only a session or always answer can be "
                                             f"time-boxed, not '{scope.value}'")
        elif lasts is not None and lasts <= timedelta(0):
            refusal = (DecisionCode.INVALID, "for: must be a positive duration")
        elif args is not None and not scope.approves:
            refusal = (DecisionCode.INVALID, "args: only an approval can carry edited args")
        elif args is not None and approval.needed > 1:
            # Every approver of a quorum must approve the same action.
            refusal = (DecisionCode.INVALID, f"args: a request that needs {approval.needed} "
                                             f"approvals cannot be edited")
        elif args is not None and await self._shared(approval):
            # The members asked their own content; an edit of the card would replace it.
            refusal = (DecisionCode.INVALID, "args: a card shared by identical requests "
                                             "cannot be edited; decide one by its own id")
        elif args is not None:
            task = await self.store.get_task(approval.task_id) if approval.task_id else None
            try:
                edited = await prepare_edit(self.engine, task, approval, args)
            except EditRefused as exc:
                refusal = (exc.code, exc.message)
            if edited is not None and scope not in self.engine.config.scopes_for(edited.risk):
                refusal = (DecisionCode.SCOPE_NOT_ALLOWED,
                           f"'{scope.value}' is not offered for the edited action "
                           f"({edited.risk.value if edited.risk else '?'})")
        if refusal is not None:
            await self.refuse(approval.id, actor, refusal[1], channel=channel)
            return DecisionResult(False, refusal[0], refusal[1], approval=approval)
        return edited, self._lasts(scope, lasts)

    def _check(self, task: Task | None, approval: Approval, scope: Scope,
               actor: str) -> DecisionResult | None:
        """What stands in the way of this answer besides the request's own status."""
        moved = _not_waiting(task, approval)
        if moved is not None:
            return moved
        people = self.engine.config.people
        if (scope.approves and self._self_forbidden(approval)
                and people.same(requester_of(task, approval), actor)):
            what = "task" if task is not None else "request"
            return DecisionResult(False, DecisionCode.NOT_AUTHORIZED,
                                  f"You submitted this {what} (as {requester_of(task, approval)}"
                                  f"); someone else must approve it", task=task,
                                  approval=approval)
        if scope.approves and any(people.same(v.actor, actor) for v in approval.votes):
            return DecisionResult(False, DecisionCode.ALREADY_COUNTED,
                                  f"You already approved this request; it counts once "
                                  f"({progress(approval)} — waiting for "
                                  f"{_more(approval)})", task=task, approval=approval)
        return None

    def _self_forbidden(self, approval: Approval) -> bool:
        """True when the requester's own approval is refused: always for an outside request
        (never approved by the identity that asked it), always under a quorum (two people
        means two people other than the one asking), and for a task's request when
        ``approvals.forbid_self_approval`` says so."""
        return (approval.outside or approval.needed > 1
                or self.engine.config.forbid_self_approval)

    async def _vote(self, task: Task | None, approval: Approval, scope: Scope, actor: str,
                    channel: str | None, lasts: timedelta | None,
                    passkey: JsonDict | None = None) -> DecisionResult | None:
        """Count one approval towards the quorum; the request stays pending. None when the
        compare-and-set lost (someone else voted or decided meanwhile)."""
        now = self._now()
        vote = Vote(actor=actor, scope=scope, at=now, channel=channel, lasts=lasts)
        counted = approval.model_copy(update={"votes": [*approval.votes, vote]})
        words = progress(counted)
        event = audit_event("approval_partial", task, approval.action, decision="approve",
                            actor=actor, scope=scope.value, reason=words, approval=counted,
                            channel=channel)
        event.passkey = passkey
        change = Change(at=now, approval=counted, approval_expect=ApprovalStatus.PENDING,
                        approval_votes=len(approval.votes), audit=[event],
                        outbox=[approval_event(ApprovalEvent.VOTED, approval.id,
                                               suffix=f":{len(counted.votes)}")])
        if task is not None:
            task.approval = counted
            task.updated_at = now
            change.task, change.expect_state = task, TaskState.WAITING_APPROVAL
        if not await self._commit(change):
            return None
        log.info("approval_partial", extra={"approval_id": approval.id, "actor": actor,
                                             "votes": len(counted.votes),
                                             "needed": counted.needed})
        await self.engine.listener.approval_decided(task, counted)  # the cards show it
        return DecisionResult(True, DecisionCode.PARTIAL,
                              f"{words} — waiting for {_more(counted)}", task=task,
                              approval=counted)

    async def _apply(self, task: Task | None, approval: Approval, scope: Scope, actor: str,
                     reason: str | None, channel: str | None, *, lasts: timedelta | None = None,
                     edited: Action | None = None, in_group: bool = False,
                     counted: list[Vote] | None = None,
                     passkey: JsonDict | None = None) -> DecisionResult | None:
        """Commit the decision; None when the compare-and-set lost (the caller sorts out why).
        ``edited``: the action approved instead of the one asked (it is what runs). A member
        of a group decided by its own id (not ``in_group``) leaves the group; one that
        follows its card's approval brings the votes that count for it (``counted``)."""
        now = self.engine.clock.now()
        status = ApprovalStatus.APPROVED if scope.approves else ApprovalStatus.DENIED
        update: dict[str, object] = {"status": status, "scope": scope, "decided_by": actor,
                                     "decided_at": now, "reason": reason}
        if edited is not None:
            update |= {"action": edited, "original_action": approval.action}
        votes = None
        if scope.approves and approval.needed > 1:
            # The approval that completes the quorum: everyone's scope counts, the narrowest
            # is granted (a session or always grant needs all of them to have meant it).
            votes = counted if counted is not None else [
                *approval.votes, Vote(actor=actor, scope=scope, at=now, channel=channel,
                                      lasts=lasts)]
            scope = narrowest([v.scope for v in votes])
            # Likewise the shortest time box any of them gave: nobody agreed to longer.
            boxes = [v.lasts for v in votes if v.lasts is not None]
            lasts = min(boxes) if boxes else None
            update |= {"votes": votes, "scope": scope}
        if scope.approves:
            # Kept on the request: the grant is made on release after a hold, and the
            # members of a group take the same time box as the answer on their card.
            update["grant_lasts"] = lasts
        # A member of a group follows its leader's final answer, which has waited out the
        # undo window already: it is not held a second time.
        hold = (self.engine.config.rules.hold_for(approval.action)
                if scope.approves and not in_group else None)
        if hold:
            update |= {"status": ApprovalStatus.HELD, "hold_until": now + hold}
        outbox = [approval_event(ApprovalEvent.DECIDED, approval.id)]
        if not coalesce.has_own_card(approval):
            outbox = []  # no card of its own to edit
            if not in_group:
                update["coalesced_into"] = None
                outbox = [coalesce.left_event(approval)]  # the shared card's count drops
        decided = approval.model_copy(update=update)
        latency = (now - approval.requested_at).total_seconds() * 1000
        note = reason
        if votes is not None:
            note = f"{progress(decided)}: " + ", ".join(v.actor for v in votes)
        if decided.hold_until is not None:
            note = (f"{note}; " if note else "") + held_words(decided)
        event = audit_event("decision", task, decided.action,
                            decision="approve" if scope.approves else "deny", actor=actor,
                            scope=scope.value, reason=note, approval=decided, channel=channel,
                            latency_ms=latency)
        if edited is not None:
            event.original_fingerprint = approval.action.fingerprint
        event.passkey = passkey
        grants: list[Grant] = []
        if scope.approves and decided.hold_until is None:
            policy_id = approval.policy_id or (task.policy_id if task else approval.id)
            grants.append(grant_for(decided.action, scope, policy_id=policy_id,
                                    task_id=task.id if task else None, actor=actor, now=now,
                                    lasts=lasts))
        change = Change(at=now, approval=decided, approval_expect=ApprovalStatus.PENDING,
                        approval_votes=len(approval.votes) if votes is not None else None,
                        grants=grants, audit=[event], outbox=outbox)
        goes_on = False
        if task is not None:
            if edited is not None:
                task.pending_action = edited  # the edited action is what runs (after a hold)
            if decided.hold_until is not None:  # it waits, still parked, until released
                task.approval, task.updated_at = decided, now
            else:
                goes_on = self._move_task(task, decided, actor, now)
            change.task, change.expect_state = task, TaskState.WAITING_APPROVAL
        if not await self._commit(change):
            return None
        log.info("approval_decided", extra={"task_id": approval.task_id,
                                             "approval_id": approval.id,
                                             "scope": scope.value, "actor": actor})
        await self._announce(task, decided,
                             TaskEvent.APPROVED if scope.approves else TaskEvent.DENIED)
        if task is not None and goes_on and self.on_runnable is not None:
            await self.on_runnable(task)
        words = SCOPE_WORDS[scope] + (" (edited)" if edited is not None else "")
        if grants and grants[0].expires_at is not None and scope is not Scope.ONCE:
            words += f" until {grants[0].expires_at.strftime('%Y-%m-%d %H:%M UTC')}"
        if votes is not None:
            words = f"{words} ({progress(decided)})"
        if decided.hold_until is not None:
            words = f"{words} — {held_words(decided)}"
        return DecisionResult(True, DecisionCode.OK, words, task=task, approval=decided)

    def _move_task(self, task: Task, decided: Approval, actor: str, now: datetime) -> bool:
        """What a decision does to the task waiting for it; True when it runs on (approved,
        or an agent told of the denial), False when it failed."""
        task.approval = decided
        task.updated_at = now
        if decided.status is ApprovalStatus.APPROVED:
            return self._take_back(task, now)
        return self._refused(task, decided, "denied", actor, refusal_reason(decided))

    async def expire_due(self) -> list[Task]:
        """Deny every request past its expiry ("approval timed out"); return the tasks
        whose request expired (outside requests have none). Members of a group expire
        with their leader: their expiry is never later than its."""
        expired = []
        for approval in await self.store.due_approvals(self.engine.clock.now()):
            task = await self._expire(approval)
            if task is not None:
                expired.append(task)
        return expired

    async def _expire(self, approval: Approval) -> Task | None:
        """Expire one pending request; its task when that moved (None for an outside
        request, a stale one, or a lost race). A request or task whose stored row cannot be
        read (see `store.readers`) is set aside here: expired with the reason, its task
        failed."""
        task = await self.store.get_task(approval.task_id) if approval.task_id else None
        if task is not None and task.unreadable is not None:
            with contextlib.suppress(Conflict):
                await self.engine.set_aside(task)
            task = None
        elif approval.task_id is not None and (
                task is None or task.approval is None or task.approval.id != approval.id):
            return None
        now = self.engine.clock.now()
        reason = approval.unreadable or "approval timed out"
        decided = approval.model_copy(update={
            "status": ApprovalStatus.EXPIRED, "scope": Scope.DENY,
            "decided_by": "auto:timeout", "decided_at": now, "reason": reason})
        event = audit_event("expired", task, approval.action, decision="deny",
                            actor="auto:timeout", scope="deny", reason=reason,
                            approval=decided)
        outbox = ([approval_event(ApprovalEvent.DECIDED, approval.id)]
                  if coalesce.has_own_card(approval) else [])
        change = Change(at=now, approval=decided, approval_expect=ApprovalStatus.PENDING,
                        audit=[event], outbox=outbox)
        goes_on = False
        if task is not None:
            task.approval = decided
            task.updated_at = now
            goes_on = self._refused(task, approval, "timed_out", "auto:timeout",
                                    "approval timed out")
            change.task = task
        if not await self._commit(change):
            return None
        await self._announce(task, decided, TaskEvent.EXPIRED)
        if goes_on and task is not None and self.on_runnable is not None:
            await self.on_runnable(task)
        return task

    async def withdraw(self, approval: Approval, actor: str) -> Approval | None:
        """Take back a pending outside request (its asker gave up waiting): it ends
        ``withdrawn`` and its cards say so; None when it was not pending any more (someone
        decided first). Who may withdraw is the caller's question."""
        now = self._now()
        decided = approval.model_copy(update={
            "status": ApprovalStatus.WITHDRAWN, "decided_by": actor, "decided_at": now,
            "reason": f"withdrawn by {actor}"})
        if coalesce.has_own_card(approval):
            outbox = [approval_event(ApprovalEvent.DECIDED, approval.id)]
        else:  # it shared another request's card: that card's count drops
            decided.coalesced_into = None
            outbox = [coalesce.left_event(approval)]
        event = audit_event("withdrawn", None, approval.action, decision="withdraw",
                            actor=actor, reason=decided.reason, approval=decided)
        change = Change(at=now, approval=decided, approval_expect=ApprovalStatus.PENDING,
                        audit=[event], outbox=outbox)
        if not await self._commit(change):
            return None
        log.info("approval_withdrawn", extra={"approval_id": approval.id, "actor": actor})
        await self._announce(None, decided, TaskEvent.DENIED)
        for member in await self.store.coalesced(approval.id):  # identical ones still ask
            if member.status is ApprovalStatus.PENDING:
                await self._detach(member)
        return decided

    # -- groups of identical requests (signoff.runtime.coalesce) --------------------------
    async def _shared(self, approval: Approval) -> bool:
        """True when pending identical requests share this request's card."""
        if approval.coalesce_key is None or not coalesce.has_own_card(approval):
            return False
        return any(m.status is ApprovalStatus.PENDING
                   for m in await self.store.coalesced(approval.id))

    async def _decide_members(self, leader: Approval, channel: str | None) -> None:
        """Give the leader's committed answer to every pending request sharing its card."""
        for member in await self.store.coalesced(leader.id):
            if coalesce.follows(leader, member):
                await self._follow(leader, member, channel)

    async def _follow(self, leader: Approval, member: Approval, channel: str | None) -> None:
        """One member takes the leader's decision: its own compare-and-set, task move,
        grant (under its own policy_id) and audit event, with the leader's decider. An
        approval counts for it only by the votes of people other than its own requester,
        against its own quorum; short of that it gets a card of its own."""
        if leader.status is ApprovalStatus.EXPIRED:
            await self._expire(member)
            return
        scope, actor = leader.scope or Scope.DENY, leader.decided_by or "?"
        for _ in range(5):
            task = await self.store.get_task(member.task_id) if member.task_id else None
            if _not_waiting(task, member) is not None:
                return  # the task moved on; nothing of it is pending here
            counted = self._votes_for(task, member, leader) if scope.approves else None
            if counted is not None and len(counted) < member.needed:
                await self._detach(member)  # its requester's vote cannot decide it
                return
            if await self._apply(task, member, scope, actor, leader.reason, channel,
                                 lasts=leader.grant_lasts, in_group=True,
                                 counted=counted if member.needed > 1 else None) is not None:
                return
            current = await self.store.get_approval(member.id)
            if current is None or current.status is not ApprovalStatus.PENDING:
                return  # decided by its own id meanwhile
            member = current

    def _votes_for(self, task: Task | None, member: Approval, leader: Approval) -> list[Vote]:
        """The approvals of the shared card (and of the member itself) that count for
        ``member``: one per person, its own requester's left out when self-approval is
        refused for it."""
        given = leader.votes or [Vote(actor=leader.decided_by or "?",
                                      scope=leader.scope or Scope.ONCE,
                                      at=leader.decided_at or self._now())]
        people = self.engine.config.people
        requester = requester_of(task, member)
        votes = [v for v in [*member.votes, *given]
                 if not (self._self_forbidden(member) and people.same(requester, v.actor))]
        first: dict[str, Vote] = {}
        for vote in votes:
            first.setdefault(vote.actor, vote)
        return [first[a] for a in people.distinct(first)]

    async def _detach(self, member: Approval) -> None:
        """Give a member a card of its own (it leaves the group, still pending)."""
        own = member.model_copy(update={"coalesced_into": None})
        change = Change(at=self._now(), approval=own, approval_expect=ApprovalStatus.PENDING,
                        outbox=[coalesce.left_event(member),
                                coalesce.card_event(own, mentions=list(own.approvers))])
        if await self._commit(change):
            log.info("coalesced_request_detached", extra={"approval_id": member.id,
                                                          "leader": member.coalesced_into})
            task = await self.store.get_task(own.task_id) if own.task_id else None
            await self.engine.listener.approval_requested(task, own)

    async def settle_coalesced(self) -> int:
        """Decide the members a crash (or a race with another node) left pending under a
        decided card, as its decision did; one that asked after that decision gets a card
        of its own. Returns how many were looked at."""
        strays = await self.store.coalesce_strays()
        for member in strays:
            leader = await self.store.get_approval(member.coalesced_into or "")
            if leader is not None and leader.status is ApprovalStatus.HELD:
                continue  # released or undone later: its members take that final answer
            if leader is not None and coalesce.follows(leader, member):
                await self._follow(leader, member, None)
            else:
                await self._detach(member)
        return len(strays)

    async def escalate(self, task: Task, *, level: int, members: Sequence[str], waited: str,
                       detail: str) -> bool:
        """Ask ``members`` too (escalation ``level``): the approval's approvers grow, the
        step is audited and announced; False when it was answered, expired or escalated by
        someone else meanwhile. Who and when is the bot's routing; this writes the state."""
        approval = task.approval
        if approval is None:
            return False
        now = self._now()
        added = [m for m in members if m not in approval.approvers]
        updated = approval.model_copy(update={
            "approvers": [*approval.approvers, *added], "escalation_level": level,
            "escalated_at": now})
        task.approval = updated
        task.updated_at = now
        event = audit_event("escalated", task, approval.action, approval=updated, reason=detail)
        announced = approval_event(ApprovalEvent.ESCALATED, approval.id, suffix=f":{level}",
                                   level=level, mentions=list(members),
                                   approvers=list(updated.approvers), waited=waited)
        change = Change(at=now, task=task, expect_state=TaskState.WAITING_APPROVAL,
                        approval=updated, approval_expect=ApprovalStatus.PENDING,
                        audit=[event], outbox=[announced])
        if not await self._commit(change):
            return False
        log.info("approval_escalated", extra={"task_id": task.id, "approval_id": approval.id,
                                              "level": level})
        await self.engine.listener.task_event(TaskEvent.ESCALATED, task, detail)
        return True

    async def revoke_grant(self, grant_id: str, actor: str) -> Grant | None:
        """Revoke a grant (audited); None if unknown."""
        grant = await self.store.get_grant(grant_id)
        if grant is None:
            return None
        event = audit_event("grant_revoked", None, None,
                            decision="revoke", actor=actor, scope=grant.scope.value,
                            reason=f"grant {grant.id} revoked").model_copy(update={
                                "tool": grant.tool, "fingerprint": grant.fingerprint,
                                "risk": grant.risk.value, "task_id": grant.task_id})
        await self._commit(Change(at=self._now(), grant_revokes=[grant.id], audit=[event]))
        return await self.store.get_grant(grant_id)
