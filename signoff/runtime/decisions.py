"""Applying answers: a person's decision, an expiry, a refused attempt, a revoked grant.

Every decision is a compare-and-set on the approval request (pending → decided) in the
same transaction as the task's state change, the grant it creates and its audit event,
so on any backend and any number of nodes the first answer wins and the action runs
once. Who may decide is the bot layer's question; this module checks what the request
itself allows (scopes, expiry, the self-approval rule).

A request from an agent that is not ours has no task: the same decision is committed
without a task to move (its grant lives under the request's own policy_id), and waiters
on `watch` (long polls) are woken once it is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from signoff.runtime.edits import EditRefused, prepare_edit
from signoff.runtime.engine import Engine
from signoff.runtime.events import ApprovalEvent, TaskEvent, approval_event, audit_event
from signoff.runtime.models import (
    Action,
    ActionRecord,
    Approval,
    ApprovalStatus,
    DecisionCode,
    Grant,
    JsonDict,
    Scope,
    Task,
    TaskState,
)
from signoff.runtime.policy.grants import grant_for
from signoff.runtime.store.port import Change
from signoff.runtime.watch import ApprovalWatch

log = logging.getLogger(__name__)

Runnable = Callable[[Task], Awaitable[None]]


@dataclass(frozen=True)
class DecisionResult:
    """What happened to one answer."""

    accepted: bool
    code: DecisionCode
    message: str
    task: Task | None = None
    approval: Approval | None = None


_DONE_WORDS = {Scope.ONCE: "Approved once", Scope.SESSION: "Approved for this session",
               Scope.ALWAYS: "Approved always", Scope.DENY: "Denied"}


def refusal_reason(approval: Approval) -> str:
    """Why a decided request did not approve: "user denied[: why]" or "approval timed out"."""
    if approval.status is ApprovalStatus.EXPIRED:
        return "approval timed out"
    return f"user denied: {approval.reason}" if approval.reason else "user denied"


def _already(approval: Approval) -> DecisionResult:
    if approval.status is ApprovalStatus.EXPIRED:
        return DecisionResult(False, DecisionCode.EXPIRED,
                              "Expired — the request timed out and was denied", approval=approval)
    when = approval.decided_at.strftime("%H:%M UTC") if approval.decided_at else "?"
    return DecisionResult(False, DecisionCode.ALREADY_DECIDED,
                          f"Already decided by {approval.decided_by} at {when}",
                          approval=approval)


class Decider:
    """Turns answers into committed state changes."""

    def __init__(self, *, engine: Engine, on_runnable: Runnable | None = None,
                 watch: ApprovalWatch | None = None) -> None:
        self.engine = engine
        self.store = engine.store
        self.on_runnable = on_runnable
        self.watch = watch or ApprovalWatch()

    async def _commit(self, change: Change) -> bool:
        """Commit one unit of work."""
        return await self.store.commit(change)

    def _now(self) -> datetime:
        return self.engine.clock.now()

    async def refuse(self, approval_id: str, actor: str, why: str, *,
                     channel: str | None = None, task: Task | None = None) -> None:
        """Audit an attempt that was not allowed (unauthorized, too late, bad scope)."""
        approval = await self.store.get_approval(approval_id)
        if task is None and approval is not None and approval.task_id:
            task = await self.store.get_task(approval.task_id)
        event = audit_event("refused", task, approval.action if approval else None,
                            decision="refused", actor=actor, reason=why, approval=approval,
                            channel=channel)
        if approval is None:
            event = event.model_copy(update={"approval_id": approval_id})
        await self._commit(Change(at=self._now(), audit=[event]))

    async def decide(self, approval_id: str, scope: Scope, actor: str, *,
                     reason: str | None = None, channel: str | None = None,
                     lasts: timedelta | None = None,
                     args: JsonDict | None = None) -> DecisionResult:
        """Apply one answer; exactly one of any number of racing answers is accepted.

        ``lasts``: a session or always grant lapses that long after the decision
        (``"for": "30m"``). ``args``: approve these edited args instead (`runtime.edits`).
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
        # changed under us (an escalation added approvers): read it again and retry.
        for _ in range(5):
            task = await self.store.get_task(approval.task_id) if approval.task_id else None
            refused = self._check(task, approval, scope, actor)
            if refused is not None and refused.code is DecisionCode.NOT_AUTHORIZED:
                await self.refuse(approval_id, actor, "self-approval is forbidden",
                                  channel=channel, task=task)
                return refused
            result = None
            if refused is None:
                result = await self._apply(task, approval, scope, actor, reason, channel,
                                           lasts=lasts, edited=edited)
                if result is not None:
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
        if approval.task_id is not None and (
                task is None or task.state is not TaskState.WAITING_APPROVAL
                or task.approval is None or task.approval.id != approval.id):
            state = task.state.value if task else "missing"
            return DecisionResult(False, DecisionCode.NOT_WAITING,
                                  f"The task is {state}, not waiting", task=task,
                                  approval=approval)
        submitter = approval.submitted_by or (task.submitted_by if task else None)
        if (self.engine.config.forbid_self_approval and scope.approves
                and submitter and submitter == actor):
            what = "task" if task is not None else "request"
            return DecisionResult(False, DecisionCode.NOT_AUTHORIZED,
                                  f"You submitted this {what}; someone else must approve it",
                                  task=task, approval=approval)
        return None

    async def _apply(self, task: Task | None, approval: Approval, scope: Scope, actor: str,
                     reason: str | None, channel: str | None, *, lasts: timedelta | None = None,
                     edited: Action | None = None) -> DecisionResult | None:
        """Commit the decision; None when the compare-and-set lost (the caller sorts out why).
        ``edited``: the action approved instead of the one asked (it is what runs)."""
        now = self.engine.clock.now()
        status = ApprovalStatus.APPROVED if scope.approves else ApprovalStatus.DENIED
        update: dict[str, object] = {"status": status, "scope": scope, "decided_by": actor,
                                     "decided_at": now, "reason": reason}
        if edited is not None:
            update |= {"action": edited, "original_action": approval.action}
        decided = approval.model_copy(update=update)
        latency = (now - approval.requested_at).total_seconds() * 1000
        event = audit_event("decision", task, decided.action,
                            decision="approve" if scope.approves else "deny", actor=actor,
                            scope=scope.value, reason=reason, approval=decided, channel=channel,
                            latency_ms=latency)
        if edited is not None:
            event.original_fingerprint = approval.action.fingerprint
        grants: list[Grant] = []
        if scope.approves:
            policy_id = approval.policy_id or (task.policy_id if task else approval.id)
            grants.append(grant_for(decided.action, scope, policy_id=policy_id,
                                    task_id=task.id if task else None, actor=actor, now=now,
                                    lasts=lasts))
        change = Change(at=now, approval=decided, approval_expect=ApprovalStatus.PENDING,
                        grants=grants, audit=[event],
                        outbox=[approval_event(ApprovalEvent.DECIDED, approval.id)])
        goes_on = False
        if task is not None:
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
        words = _DONE_WORDS[scope] + (" (edited)" if edited is not None else "")
        if grants and grants[0].expires_at is not None and scope is not Scope.ONCE:
            words += f" until {grants[0].expires_at.strftime('%Y-%m-%d %H:%M UTC')}"
        return DecisionResult(True, DecisionCode.OK, words, task=task, approval=decided)

    def _move_task(self, task: Task, decided: Approval, actor: str, now: datetime) -> bool:
        """What a decision does to the task waiting for it; True when it runs on (approved,
        or an agent told of the denial), False when it failed."""
        task.approval = decided
        task.updated_at = now
        if decided.status is ApprovalStatus.APPROVED:
            if decided.original_action is not None:
                task.pending_action = decided.action  # the edited action is what runs
            self._take_back(task, now)
            return True
        return self._refused(task, decided, "denied", actor, refusal_reason(decided))

    def _take_back(self, task: Task, now: datetime) -> None:
        """The task runs again on this node (its runnable hook hands it to the worker)."""
        task.state = TaskState.IN_PROGRESS
        task.claimed_by = self.engine.config.node_id
        task.lease_until = now + self.engine.config.lease

    def _refused(self, task: Task, approval: Approval, outcome: str, actor: str,
                 reason: str) -> bool:
        """Record a deny or a timeout; True when the task goes on (an agent told to find
        another way, `on_deny = "tell_model"`), False when it failed."""
        if task.agent is None or not task.agent.tells_model:
            self._end_denied(task, approval, outcome, actor, reason)
            return False
        self._record_refusal(task, approval, outcome, actor, reason)
        task.pending_action = None  # the agent loop tells the model on its next run
        self._take_back(task, self.engine.clock.now())
        return True

    def _record_refusal(self, task: Task, approval: Approval, outcome: str, actor: str,
                        reason: str) -> None:
        action = approval.action
        task.actions.append(ActionRecord(
            step=task.step_index, tool=action.tool, args=action.args, risk=action.risk,
            capability=action.capability, targets=list(action.targets), decision=outcome,
            decided_by=actor, outcome=outcome, error=reason, at=self.engine.clock.now()))

    def _end_denied(self, task: Task, approval: Approval, outcome: str, actor: str,
                    reason: str) -> None:
        self._record_refusal(task, approval, outcome, actor, reason)
        task.state = TaskState.FAILED
        task.pending_action = None
        task.claimed_by = task.lease_until = None
        task.result = {"reason": reason, "step": task.step_index}

    async def _announce(self, task: Task | None, approval: Approval, kind: TaskEvent) -> None:
        self.watch.fire(approval.id)
        listener = self.engine.listener
        await listener.approval_decided(task, approval)
        if task is None:
            return
        await listener.task_event(kind, task, approval.reason)
        if task.state is TaskState.FAILED:
            await listener.task_event(TaskEvent.FAILED, task, (task.result or {}).get("reason"))

    async def expire_due(self) -> list[Task]:
        """Deny every request past its expiry ("approval timed out"); return the tasks
        whose request expired (outside requests have none)."""
        expired = []
        for approval in await self.store.due_approvals(self.engine.clock.now()):
            task = await self.store.get_task(approval.task_id) if approval.task_id else None
            if approval.task_id is not None and (
                    task is None or task.approval is None or task.approval.id != approval.id):
                continue
            now = self.engine.clock.now()
            decided = approval.model_copy(update={
                "status": ApprovalStatus.EXPIRED, "scope": Scope.DENY,
                "decided_by": "auto:timeout", "decided_at": now,
                "reason": "approval timed out"})
            event = audit_event("expired", task, approval.action, decision="deny",
                                actor="auto:timeout", scope="deny", reason="approval timed out",
                                approval=decided)
            change = Change(at=now, approval=decided, approval_expect=ApprovalStatus.PENDING,
                            audit=[event],
                            outbox=[approval_event(ApprovalEvent.DECIDED, approval.id)])
            goes_on = False
            if task is not None:
                task.approval = decided
                task.updated_at = now
                goes_on = self._refused(task, approval, "timed_out", "auto:timeout",
                                        "approval timed out")
                change.task = task
            if await self._commit(change):
                await self._announce(task, decided, TaskEvent.EXPIRED)
                if task is not None:
                    expired.append(task)
                if goes_on and task is not None and self.on_runnable is not None:
                    await self.on_runnable(task)
        return expired

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
