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
broadcast to the channel, a Telegram reply). This module decides who and when; the
`Decider` writes it — one compare-and-set commit of task and approval together, only
while the request is still pending, so with several nodes each level is taken exactly
once — with an ``approval_escalated`` event in the same commit, which the outbox turns
into the card update and the reply, in that order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from signoff.bot.routing.oncall import (
    EscalationStep,
    Override,
    Rotation,
    next_escalation,
)
from signoff.runtime.clock import Clock
from signoff.runtime.decisions import Decider
from signoff.runtime.models import ApprovalStatus, RunMode, Task, TaskState
from signoff.runtime.outages import periodic
from signoff.runtime.schedule.durations import format_duration

__all__ = ["Escalator"]

log = logging.getLogger(__name__)


class Escalator:
    """Moves unanswered scheduled requests up the escalation chain."""

    def __init__(self, *, decider: Decider, clock: Clock, rotations: Sequence[Rotation],
                 overrides: Sequence[Override] = (), interval: float = 1.0,
                 wake: Callable[[], None] | None = None) -> None:
        self.decider = decider
        self.store = decider.store
        self.clock = clock
        self.rotations = list(rotations)
        self.overrides = list(overrides)
        self.interval = interval
        self.wake = wake  # e.g. Dispatcher.wake: deliver the card update now

    async def run(self) -> None:
        """Look at pending requests every ``interval`` seconds, until cancelled; a failed
        round (the database away) is reported on the node's outages and tried again."""
        await periodic("escalation", self.tick, every=self.interval,
                       outages=self.decider.engine.outages)

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
        detail = (f"no answer after {format_duration(step.after)}: escalated to "
                  f"{', '.join(step.members)} (rotation {', '.join(step.rotations)})")
        # The decider writes the state (one writer of tasks and approvals); a lost race
        # means it was answered, expired or escalated by another node meanwhile.
        if not await self.decider.escalate(task, level=step.level, members=step.members,
                                           waited=format_duration(step.after), detail=detail):
            return False
        if self.wake is not None:
            self.wake()
        return True
