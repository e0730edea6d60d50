"""Committing answers: a person's decision, an expiry, a refused attempt, a revoked grant.

Every decision is a compare-and-set on the approval request (pending → decided) in the
same transaction as the task's state change, the grant it creates and its audit event,
so on any backend and any number of nodes the first answer wins and the action runs
once. Who may decide is the bot layer's question; what an answer does to a request —
its scopes, the self-approval rule, the quorum, the hold — is the pure rule
`signoff.runtime.decisions.answer.answer`. `Decider.decide` reads the request and its
task, asks that rule, commits its outcome in one `Change` and announces it; every path
that decides (API route, batch, chat click, e-mail link, CLI) ends here.

A request under a quorum (`Approval.needed` > 1) collects approvals while it stays
pending; each is its own compare-and-set on the request's status *and* vote count, so
racing approvals from two surfaces or nodes never lose one. With a hold
(`approvals.hold`), the approval that decides parks the request as ``held``;
`release_due` lets it run then, `undo` denies it before (both in
`signoff.runtime.decisions.hold`, on the same `Settler` as this class).

A request from an agent that is not ours has no task: the same decision is committed
without a task to move (its grant lives under the request's own policy_id), and waiters
on `watch` (long polls) are woken once it is committed.

A request that shares its card with identical ones (`signoff.runtime.coalesce`) is
decided like any other; the same answer is then given to each of its members, each
with its own compare-and-set, task move, grant and audit event
(`signoff.runtime.decisions.members`); an expiry is `signoff.runtime.decisions.expiry`.
"""


from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from signoff.runtime import coalesce
from signoff.runtime.decisions.answer import (
    Answer,
    Move,
    Outcome,
    Rules,
    answer,
    grant_lasts,
    terms_refusal,
)
from signoff.runtime.decisions.expiry import Expiry
from signoff.runtime.decisions.hold import Holds
from signoff.runtime.decisions.members import Members
from signoff.runtime.decisions.settle import DecisionResult, Runnable, Settler
from signoff.runtime.edits import EditRefused, prepare_edit
from signoff.runtime.engine import Engine
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
)
from signoff.runtime.store.port import Change
from signoff.runtime.watch import ApprovalWatch
from signoff.runtime.words import ALREADY_DECIDED, WITHDRAWN, at_hhmm, refusal_reason

log = logging.getLogger(__name__)

__all__ = ["Decider", "DecisionResult", "Runnable"]


def _already(approval: Approval) -> DecisionResult:
    if approval.status is ApprovalStatus.EXPIRED:
        return DecisionResult(False, DecisionCode.EXPIRED,
                              "Expired — the request timed out and was denied", approval=approval)
    done = WITHDRAWN if approval.status is ApprovalStatus.WITHDRAWN else ALREADY_DECIDED
    return DecisionResult(False, DecisionCode.ALREADY_DECIDED,
                          f"{done} by {approval.decided_by} at {at_hhmm(approval.decided_at)}",
                          approval=approval)


class Decider:
    """Turns answers into committed state changes: reads, asks `answer`, commits its
    outcome in one compare-and-set, announces it. Holds its `Settler` (the moves every
    decision shares) and the undo window (`Holds`) by composition."""

    def __init__(self, *, engine: Engine, on_runnable: Runnable | None = None,
                 watch: ApprovalWatch | None = None) -> None:
        self.settler = Settler(engine=engine, on_runnable=on_runnable, watch=watch)
        self.holds = Holds(self.settler)
        self.expiry = Expiry(self.settler)
        self.members = Members(self.settler, self.expiry, self._commit, self.rules)
        self.engine = engine
        self.store = engine.store
        self.watch = self.settler.watch

    @property
    def on_runnable(self) -> Runnable | None:
        """Called with a task that runs on after a decision: the worker's `hand_over`,
        given at construction (the wiring); tests driving a node step by step swap the
        settler's."""
        return self.settler.on_runnable

    async def refuse(self, approval_id: str, actor: str, why: str, *,
                     channel: str | None = None, task: Task | None = None) -> None:
        """Audit an attempt that was not allowed (unauthorized, too late, bad scope)."""
        await self.settler.refuse(approval_id, actor, why, channel=channel, task=task)

    async def release_due(self) -> list[Task]:
        """Let every held request whose window is over run; return the tasks resumed."""
        return await self.holds.release_due()

    async def undo(self, approval_id: str, actor: str, *,
                   channel: str | None = None) -> DecisionResult:
        """Deny a held request before its window ends ("undone by <actor>")."""
        return await self.holds.undo(approval_id, actor, channel=channel)

    async def expire_due(self) -> list[Task]:
        """Deny every request past its expiry; return the tasks whose request expired."""
        return await self.expiry.expire_due()

    async def settle_coalesced(self) -> int:
        """Decide the members a crash left pending under a decided card (`Members`)."""
        return await self.members.settle_strays()

    def rules(self, approval: Approval, edited: Action | None = None) -> Rules:
        """What the configuration says about deciding ``approval`` (approved as ``edited``,
        when a person edited its args): the undo window is the longer of the asked
        action's and the edit's, since an edit can make an action riskier and what runs
        is the edit."""
        config = self.engine.config
        hold = config.rules.hold_for(approval.action)
        if edited is not None:
            hold = max(hold, config.rules.hold_for(edited))
        return Rules(people=config.people, forbid_self_approval=config.forbid_self_approval,
                     grant_ttl=config.grant_ttl, hold=hold)

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
        terms = await self._answer_terms(approval, scope, actor, lasts, args, channel)
        if isinstance(terms, DecisionResult):
            return terms
        given = Answer(scope=scope, actor=actor, reason=reason, channel=channel,
                       lasts=terms[1], edited=terms[0])
        return await self._settle(approval, given, passkey)

    async def _settle(self, approval: Approval, given: Answer,
                      passkey: JsonDict | None) -> DecisionResult:
        """Read, answer, commit; retried while the request stays pending but its row or its
        task's changed under us (an escalation added approvers, another approval of a
        quorum was counted), once more per approval a quorum needs."""
        for _ in range(5 + approval.needed):
            task = await self.store.get_task(approval.task_id) if approval.task_id else None
            outcome = answer(approval, task, given, self.rules(approval, given.edited),
                             self.settler.now())
            if outcome.refused is not None:
                await self.refuse(approval.id, given.actor, outcome.refused,
                                  channel=given.channel, task=task)
                return outcome.result
            if outcome.move is not Move.NONE and await self._commit(task, outcome, passkey):
                if outcome.approval is not None and approval.coalesce_key is not None:
                    await self.members.decide(outcome.approval, given.channel)
                return outcome.result
            # Lost, or the task moved on: if someone decided meanwhile, say who.
            current = await self.store.get_approval(approval.id)
            if current is None or current.status is not ApprovalStatus.PENDING:
                await self.refuse(approval.id, given.actor, "too late: already decided",
                                  channel=given.channel)
                return _already(current or approval)
            if outcome.move is Move.NONE:
                return outcome.result
            approval = current
        return DecisionResult(False, DecisionCode.NOT_WAITING, "The task keeps changing; try again")

    async def _commit(self, task: Task | None, outcome: Outcome,
                      passkey: JsonDict | None = None) -> bool:
        """Commit ``outcome`` in one compare-and-set with its task's move, then announce it;
        False when the compare-and-set lost (the caller sorts out why)."""
        decided = outcome.approval
        assert decided is not None  # a move always carries its request
        now = self.settler.now()
        for event in outcome.audit:
            event.passkey = passkey
        change = Change(at=now, approval=decided, approval_expect=ApprovalStatus.PENDING,
                        approval_votes=outcome.votes_expect, grants=outcome.grants,
                        audit=outcome.audit, outbox=outcome.outbox)
        goes_on = False
        if task is not None:
            if outcome.edited is not None:
                task.pending_action = outcome.edited  # what runs (after a hold)
            if outcome.move is Move.WAIT:  # counted, or held until released
                task.approval, task.updated_at = decided, now
            else:
                goes_on = self._move_task(task, decided, now)
            change.task, change.expect_state = task, TaskState.WAITING_APPROVAL
        if not await self.settler.commit(change):
            return False
        await self._announce(task, decided, outcome)
        if task is not None and goes_on and self.on_runnable is not None:
            await self.on_runnable(task)
        return True

    async def _announce(self, task: Task | None, decided: Approval, outcome: Outcome) -> None:
        """Log and announce a committed outcome: a counted vote shows on the cards only."""
        if outcome.result.code is DecisionCode.PARTIAL:
            log.info("approval_partial", extra={"approval_id": decided.id,
                                                 "actor": decided.votes[-1].actor,
                                                 "votes": len(decided.votes),
                                                 "needed": decided.needed})
            await self.engine.listener.approval_decided(task, decided)  # the cards show it
            return
        log.info("approval_decided", extra={"task_id": decided.task_id,
                                             "approval_id": decided.id,
                                             "scope": (decided.scope or Scope.DENY).value,
                                             "actor": decided.decided_by})
        await self.settler.announce(task, decided, TaskEvent.APPROVED
                                    if decided.status is not ApprovalStatus.DENIED
                                    else TaskEvent.DENIED)

    async def _answer_terms(self, approval: Approval, scope: Scope, actor: str,
                            lasts: timedelta | None, args: JsonDict | None,
                            channel: str | None
                            ) -> tuple[Action | None, timedelta | None] | DecisionResult:
        """The edited action (None: not edited) and the grant's lifetime of an answer, or
        the refusal (audited) of terms that do not fit it; nothing is decided then."""
        refusal: tuple[DecisionCode, str] | None = None
        edited = None
        why = terms_refusal(approval, scope, lasts, args is not None)
        if why is not None:
            refusal = (DecisionCode.INVALID, why)
        elif args is not None and await self.members.shared(approval):
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
        return edited, grant_lasts(scope, lasts, self.rules(approval))

    def _move_task(self, task: Task, decided: Approval, now: datetime) -> bool:
        """What a decision does to the task waiting for it; True when it runs on (approved,
        or an agent told of the denial), False when it failed."""
        task.approval = decided
        task.updated_at = now
        if decided.status is ApprovalStatus.APPROVED:
            return self.settler.take_back(task, now)
        return self.settler.deny_task(task, decided, "denied", decided.decided_by or "?",
                                      refusal_reason(decided))

    async def withdraw(self, approval: Approval, actor: str) -> Approval | None:
        """Take back a pending outside request (its asker gave up waiting): it ends
        ``withdrawn`` and its cards say so; None when it was not pending any more (someone
        decided first). Who may withdraw is the caller's question."""
        now = self.settler.now()
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
        if not await self.settler.commit(change):
            return None
        log.info("approval_withdrawn", extra={"approval_id": approval.id, "actor": actor})
        await self.settler.announce(None, decided, TaskEvent.DENIED)
        for member in await self.store.coalesced(approval.id):  # identical ones still ask
            if member.status is ApprovalStatus.PENDING:
                await self.members.detach(member)
        return decided

    async def escalate(self, task: Task, *, level: int, members: Sequence[str], waited: str,
                       detail: str) -> bool:
        """Ask ``members`` too (escalation ``level``): the approval's approvers grow, the
        step is audited and announced; False when it was answered, expired or escalated by
        someone else meanwhile. Who and when is the bot's routing; this writes the state."""
        approval = task.approval
        if approval is None:
            return False
        now = self.settler.now()
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
        if not await self.settler.commit(change):
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
        await self.settler.commit(Change(at=self.settler.now(), grant_revokes=[grant.id],
                                         audit=[event]))
        return await self.store.get_grant(grant_id)
