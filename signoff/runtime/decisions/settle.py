"""What every decision shares: its result, the moves it makes on a waiting task, and
the announcement after its commit.

A plain class: the `Decider` (`signoff.runtime.decisions.decider`) and the undo window
(`signoff.runtime.decisions.hold.Holds`) each hold the same `Settler`, so every decision
commits, moves its task and announces itself the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from signoff.runtime.engine import Engine
from signoff.runtime.events import TaskEvent, audit_event
from signoff.runtime.models import (
    ActionRecord,
    Approval,
    DecisionCode,
    Task,
    TaskState,
)
from signoff.runtime.store.port import Change
from signoff.runtime.watch import ApprovalWatch

Runnable = Callable[[Task], Awaitable[None]]


@dataclass(frozen=True)
class DecisionResult:
    """What happened to one answer."""

    accepted: bool
    code: DecisionCode
    message: str
    task: Task | None = None
    approval: Approval | None = None



class Settler:
    """The commit, the task moves and the announcement every decision shares."""

    def __init__(self, *, engine: Engine, on_runnable: Runnable | None = None,
                 watch: ApprovalWatch | None = None) -> None:
        self.engine = engine
        self.store = engine.store
        self.on_runnable = on_runnable
        self.watch = watch or ApprovalWatch(states=self.store.approval_states)

    async def commit(self, change: Change) -> bool:
        """Commit one unit of work."""
        return await self.store.commit(change)

    def now(self) -> datetime:
        """The time by the engine's Clock."""
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
        await self.commit(Change(at=self.now(), audit=[event]))

    def take_back(self, task: Task, now: datetime) -> bool:
        """The task runs again: on this node (True: its runnable hook hands it to the
        worker), or, when its steps used another node's work dir, queued for that node
        alone (False: nothing to run here)."""
        if self.engine.pinned_to(task) is not None:
            self.engine.requeue(task)
            return False
        task.state = TaskState.IN_PROGRESS
        task.claimed_by = self.engine.config.node_id
        task.lease_until = now + self.engine.config.lease
        return True

    def deny_task(self, task: Task, approval: Approval, outcome: str, actor: str,
                 reason: str) -> bool:
        """Record a deny or a timeout; True when the task goes on here (an agent told to
        find another way, `on_deny = "tell_model"`), False when it failed or was queued
        for the node whose work dir it used (`take_back`)."""
        if task.agent is None or not task.agent.tells_model:
            self._end_denied(task, approval, outcome, actor, reason)
            return False
        self._record_refusal(task, approval, outcome, actor, reason)
        task.pending_action = None  # the agent loop tells the model on its next run
        return self.take_back(task, self.engine.clock.now())

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

    async def announce(self, task: Task | None, approval: Approval, kind: TaskEvent) -> None:
        """Wake the waiters on ``approval`` and tell the listeners (cards, the task)."""
        self.watch.fire(approval.id, approval)
        listener = self.engine.listener
        await listener.approval_decided(task, approval)
        if task is None:
            return
        await listener.task_event(kind, task, approval.reason)
        if task.state is TaskState.FAILED:
            await listener.task_event(TaskEvent.FAILED, task, (task.result or {}).get("reason"))
