"""Escalation: a scheduled run's request nobody answered goes up the on-call chain.

Which requests: those of SCHEDULED tasks (a run parked by ``cron_mode = "ask"``, or a
scheduled run whose gated action was cut short by a crash). They are addressed to whoever
is on call, and nobody is watching a scheduled run the way the submitter of an interactive
task is; interactive requests go to every approval channel and are not escalated.

When a request has waited its level's ``escalate_after`` (counted from the request, then
from the last escalation), the current members of the next rotation(s) are added to the
request's approvers and mentioned on the same card; the earlier approvers can still
answer. Neither Slack nor Telegram notifies anyone of an edit, so the escalation is also
a new message under the card naming everyone who is asked now (a Slack thread reply
broadcast to the channel, a Telegram reply). The change is one compare-and-set commit —
task and approval together, only while the request is still pending — so with several
nodes each level is taken exactly once, and the card update and the reply ride in the
outbox of that same commit, in that order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from signoff.bot.outbox import thread_reply
from signoff.bot.routing.oncall import (
    EscalationStep,
    OverrideLike,
    RotationLike,
    next_escalation,
)
from signoff.runtime.clock import Clock
from signoff.runtime.events import EngineListener, NullListener, TaskEvent, audit_event
from signoff.runtime.models import ApprovalStatus, RunMode, Task, TaskState
from signoff.runtime.schedule.durations import format_duration
from signoff.runtime.store.port import Change, OutboxItem, TaskStore

__all__ = ["Escalator", "escalation_item", "escalation_reply"]

log = logging.getLogger(__name__)


def escalation_item(approval_id: str, level: int, mentions: Sequence[str]) -> OutboxItem:
    """The card update that mentions the new approvers (expanded per surface)."""
    return OutboxItem(key=f"update:{approval_id}:esc{level}", surface="*", kind="update",
                      payload={"approval_id": approval_id, "mentions": list(mentions)},
                      approval_id=approval_id)


def escalation_reply(approval_id: str, level: int, waited: str,
                     approvers: Sequence[str]) -> OutboxItem:
    """The new message under the card that notifies everyone asked now."""
    text = f"No answer after {waited}: escalated (level {level}). Your answer is needed:"
    return thread_reply(approval_id, f"thread:{approval_id}:esc{level}", text, approvers)


class Escalator:
    """Moves unanswered scheduled requests up the escalation chain."""

    def __init__(self, *, store: TaskStore, clock: Clock, rotations: Sequence[RotationLike],
                 overrides: Sequence[OverrideLike] = (), listener: EngineListener | None = None,
                 interval: float = 1.0, wake: Callable[[], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.rotations = list(rotations)
        self.overrides = list(overrides)
        self.listener: EngineListener = listener or NullListener()
        self.interval = interval
        self.wake = wake  # e.g. Dispatcher.wake: deliver the card update now

    async def run(self) -> None:
        """Look at pending requests every ``interval`` seconds, until cancelled."""
        while True:
            try:
                await self.tick()
            except Exception:  # a store hiccup must not end escalation for good
                log.exception("escalation_round_failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> list[Task]:
        """One round: escalate every request that is due; return the tasks escalated."""
        if not self.rotations:
            return []
        now = self.clock.now()
        escalated: list[Task] = []
        cursor: str | None = None
        while True:
            page = await self.store.pending_approvals(limit=100, cursor=cursor)
            for item in page.items:
                if await self._escalate(item, now):
                    escalated.append(item)
            if page.next_cursor is None:
                return escalated
            cursor = page.next_cursor

    def due(self, task: Task, now: datetime) -> EscalationStep | None:
        """The step to take for ``task`` at ``now``, or None."""
        approval = task.approval
        if (task.mode is not RunMode.SCHEDULED or task.state is not TaskState.WAITING_APPROVAL
                or approval is None or approval.status is not ApprovalStatus.PENDING
                or approval.expires_at <= now):  # expiry is the sweeper's, not ours
            return None
        step = next_escalation(self.rotations, self.overrides, approval.escalation_level, now)
        if step is None or now - (approval.escalated_at or approval.requested_at) < step.after:
            return None
        return step

    async def _escalate(self, task: Task, now: datetime) -> bool:
        step = self.due(task, now)
        if step is None or task.approval is None:
            return False
        approval = task.approval
        added = [m for m in step.members if m not in approval.approvers]
        updated = approval.model_copy(update={
            "approvers": [*approval.approvers, *added], "escalation_level": step.level,
            "escalated_at": now})
        task.approval = updated
        task.updated_at = now
        detail = (f"no answer after {format_duration(step.after)}: escalated to "
                  f"{', '.join(step.members)} (rotation {', '.join(step.rotations)})")
        event = audit_event("escalated", task, approval.action, approval=updated, reason=detail)
        change = Change(at=now, task=task, expect_state=TaskState.WAITING_APPROVAL,
                        approval=updated,
                        approval_expect=ApprovalStatus.PENDING, audit=[event],
                        outbox=[escalation_item(approval.id, step.level, step.members),
                                escalation_reply(approval.id, step.level,
                                                 format_duration(step.after),
                                                 updated.approvers)])
        if not await self.store.commit(change):
            # Answered, expired or escalated by another node meanwhile: nothing to do.
            return False
        log.info("approval_escalated", extra={"task_id": task.id, "approval_id": approval.id,
                                              "level": step.level})
        if self.wake is not None:
            self.wake()
        await self.listener.task_event(TaskEvent.ESCALATED, task, detail)
        return True
