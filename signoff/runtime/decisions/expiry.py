"""Expiry: a request nobody answered in time is denied ("approval timed out").

Its own compare-and-set (pending → expired) with the task's move, like every decision,
through the decider's `signoff.runtime.decisions.settle.Settler`.
"""

from __future__ import annotations

import contextlib

from signoff.errors import Conflict
from signoff.runtime import coalesce
from signoff.runtime.decisions.settle import Settler
from signoff.runtime.events import ApprovalEvent, TaskEvent, approval_event, audit_event
from signoff.runtime.models import Approval, ApprovalStatus, Scope, Task
from signoff.runtime.store.port import Change


class Expiry:
    """Denies the requests past their expiry."""

    def __init__(self, settler: Settler) -> None:
        self.settler = settler

    async def expire_due(self) -> list[Task]:
        """Deny every request past its expiry ("approval timed out"); return the tasks
        whose request expired (outside requests have none). Members of a group expire
        with their leader: their expiry is never later than its."""
        expired = []
        for approval in await self.settler.store.due_approvals(self.settler.engine.clock.now()):
            task = await self.expire(approval)
            if task is not None:
                expired.append(task)
        return expired

    async def expire(self, approval: Approval) -> Task | None:
        """Expire one pending request; its task when that moved (None for an outside
        request, a stale one, or a lost race). A request or task whose stored row cannot be
        read (see `store.readers`) is set aside here: expired with the reason, its task
        failed."""
        task = await self.settler.store.get_task(approval.task_id) if approval.task_id else None
        if task is not None and task.unreadable is not None:
            with contextlib.suppress(Conflict):
                await self.settler.engine.set_aside(task)
            task = None
        elif approval.task_id is not None and (
                task is None or task.approval is None or task.approval.id != approval.id):
            return None
        now = self.settler.engine.clock.now()
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
            goes_on = self.settler.deny_task(task, approval, "timed_out", "auto:timeout",
                                    "approval timed out")
            change.task = task
        if not await self.settler.commit(change):
            return None
        await self.settler.announce(task, decided, TaskEvent.EXPIRED)
        if goes_on and task is not None and self.settler.on_runnable is not None:
            await self.settler.on_runnable(task)
        return task

