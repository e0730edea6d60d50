"""The undo window: an approved request that waits (``held``) before its action runs.

With ``approvals.hold`` set for a risk class, the approval that decides a request parks
it as `ApprovalStatus.HELD` until `Approval.hold_until` (durable: a crash keeps it held).
Then one of two compare-and-sets on that status wins, exactly once on any node:
`release_due` (the daemon's sweep, by Clock time) makes it approved — grants and the
task's resumption happen only now — or `undo` (anyone who may decide the request, before
``hold_until``) denies it, "undone by <actor>". Both are audited (``released``, ``undo``).
"""

from __future__ import annotations

import logging

from signoff.runtime.decisions.settle import DecisionResult, Settler
from signoff.runtime.events import ApprovalEvent, TaskEvent, approval_event, audit_event
from signoff.runtime.models import Approval, ApprovalStatus, DecisionCode, Scope, Task, TaskState
from signoff.runtime.policy.grants import grant_for, home_of, policy_of
from signoff.runtime.store.port import Change
from signoff.runtime.words import refusal_reason

log = logging.getLogger(__name__)

RELEASER = "auto:hold"


class Holds:
    """Releasing and undoing held approvals, through the decider's `Settler`."""

    def __init__(self, settler: Settler) -> None:
        self.settler = settler
        self.store = settler.store

    async def release_due(self) -> list[Task]:
        """Let every held request whose window is over run; return the tasks resumed."""
        resumed = []
        for approval in await self.store.held_approvals():
            now = self.settler.now()
            if approval.hold_until is None or approval.hold_until > now:
                continue
            task = await self.store.get_task(approval.task_id) if approval.task_id else None
            if approval.task_id is not None and (
                    task is None or task.state is not TaskState.WAITING_APPROVAL
                    or task.approval is None or task.approval.id != approval.id):
                continue
            if await self._release(task, approval) and task is not None:
                resumed.append(task)
        return resumed

    async def _release(self, task: Task | None, approval: Approval) -> bool:
        now = self.settler.now()
        scope = approval.scope or Scope.ONCE
        done = approval.model_copy(update={"status": ApprovalStatus.APPROVED})
        policy_id, home = policy_of(approval, task), home_of(approval, task)
        grant = grant_for(approval.action, scope, policy_id=policy_id, home=home,
                          task_id=task.id if task else None,
                          actor=approval.decided_by or RELEASER, now=now,
                          lasts=approval.grant_lasts,
                          schedule_definition=task.schedule_definition if task else None)
        event = audit_event("released", task, approval.action, decision="approve",
                            actor=RELEASER, scope=scope.value, approval=done,
                            reason=f"hold over; approved by {approval.decided_by}")
        change = Change(at=now, approval=done, approval_expect=ApprovalStatus.HELD,
                        grants=[grant], audit=[event],
                        outbox=[approval_event(ApprovalEvent.DECIDED, approval.id,
                                               suffix=":released")])
        runs_here = False
        if task is not None:
            task.approval, task.updated_at = done, now
            runs_here = self.settler.take_back(task, now)
            change.task, change.expect_state = task, TaskState.WAITING_APPROVAL
        if not await self.settler.commit(change):
            return False  # undone, or released by another node, meanwhile
        log.info("approval_released", extra={"approval_id": approval.id,
                                             "task_id": approval.task_id})
        self.settler.watch.fire(approval.id, done)
        await self.settler.engine.listener.approval_decided(task, done)
        if task is not None and runs_here and self.settler.on_runnable is not None:
            await self.settler.on_runnable(task)
        return True

    async def undo(self, approval_id: str, actor: str, *,
                   channel: str | None = None) -> DecisionResult:
        """Deny a held request before its window ends ("undone by <actor>")."""
        approval = await self.store.get_approval(approval_id)
        if approval is None:
            await self.settler.refuse(approval_id, actor, "undo: unknown approval request",
                              channel=channel)
            return DecisionResult(False, DecisionCode.UNKNOWN, "Unknown request")
        now = self.settler.now()
        if (approval.status is not ApprovalStatus.HELD or approval.hold_until is None
                or approval.hold_until <= now):
            await self.settler.refuse(approval.id, actor, "too late to undo", channel=channel)
            return _not_held(approval)
        task = await self.store.get_task(approval.task_id) if approval.task_id else None
        reason = f"undone by {actor}"
        undone = approval.model_copy(update={
            "status": ApprovalStatus.DENIED, "scope": Scope.DENY, "decided_by": actor,
            "decided_at": now, "reason": reason})
        event = audit_event("undo", task, approval.action, decision="deny", actor=actor,
                            scope="deny", reason=reason, approval=undone, channel=channel)
        change = Change(at=now, approval=undone, approval_expect=ApprovalStatus.HELD,
                        audit=[event], outbox=[approval_event(ApprovalEvent.DECIDED,
                                                              approval.id, suffix=":undone")])
        goes_on = False
        if task is not None:
            task.approval, task.updated_at = undone, now
            goes_on = self.settler.deny_task(task, undone, "denied", actor, refusal_reason(undone))
            change.task, change.expect_state = task, TaskState.WAITING_APPROVAL
        if not await self.settler.commit(change):
            current = await self.store.get_approval(approval.id) or approval
            return _not_held(current)
        log.info("approval_undone", extra={"approval_id": approval.id, "actor": actor})
        await self.settler.announce(task, undone, TaskEvent.DENIED)
        if task is not None and goes_on and self.settler.on_runnable is not None:
            await self.settler.on_runnable(task)
        return DecisionResult(True, DecisionCode.OK, f"Undone — denied ({reason})", task=task,
                              approval=undone)


def _not_held(approval: Approval) -> DecisionResult:
    if approval.status is ApprovalStatus.HELD:
        why = "its undo window is over; it runs now"
    elif approval.status is ApprovalStatus.PENDING:
        why = "it is still pending (nothing was approved yet)"
    else:
        why = f"it is already {approval.status.value}"
    return DecisionResult(False, DecisionCode.NOT_HELD, f"Too late to undo: {why}",
                          approval=approval)
