"""Reminders: one new message, ``approvals.remind_before`` before a request expires.

A card sits in a busy channel; an edit notifies nobody. So once per request, when it has
``remind_before`` left, a reply goes under every copy of its card (a Slack thread reply
broadcast to the channel, a Telegram reply to the card) naming everyone who is asked now:
``approvals.approvers``, the request's own approvers (on-call at request time, escalation
targets) and, for a scheduled run, whoever is on call at this moment.

Exactly once, across restarts and nodes: the reminder is an ``approval_reminded`` event
in the outbox under a key made of the approval id alone, and the outbox ignores a second
insert of a key. Every node's tick may write it; the first commit wins, the others add
nothing. The tick runs every few seconds (the reminder is that late at most); a reminder
still queued when the request is answered is not sent. A request whose whole life is
shorter than ``remind_before`` gets none (its card is the fresh notice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from signoff.bot.cards import describe
from signoff.runtime.clock import Clock
from signoff.runtime.events import ApprovalEvent, approval_event
from signoff.runtime.models import Approval, ApprovalStatus, RunMode, Task
from signoff.runtime.outages import Outages, periodic
from signoff.runtime.schedule.durations import format_duration
from signoff.runtime.store.port import Change, TaskStore

__all__ = ["Reminder", "time_left"]

log = logging.getLogger(__name__)

OnCall = Callable[[], Iterable[str]]


def time_left(delta: timedelta) -> str:
    """``5m``, ``1h30m``, ``45s``: what a person reads, to the minute from a minute up."""
    seconds = max(0, round(delta.total_seconds()))
    if seconds >= 60:
        seconds = round(seconds / 60) * 60
    return format_duration(timedelta(seconds=seconds))


class Reminder:
    """Queues the one reminder of each pending request when its time comes."""

    def __init__(self, *, store: TaskStore, clock: Clock, before: timedelta,
                 approvers: Sequence[str] = (), oncall: OnCall | None = None,
                 interval: float = 5.0, wake: Callable[[], None] | None = None,
                 outages: Outages | None = None) -> None:
        self.store = store
        self.clock = clock
        self.outages = outages or Outages(clock)  # the daemon's engine's: /health reads it
        self.before = before
        self.approvers = list(approvers)
        self.oncall = oncall
        self.interval = interval
        self.wake = wake  # e.g. Dispatcher.wake: deliver the reminder now
        # Requests this process has already queued: saves a re-insert each tick (the
        # outbox key, not this set, is what makes a reminder happen once).
        self._sent: set[str] = set()

    async def run(self) -> None:
        """Look at pending requests every ``interval`` seconds, until cancelled."""
        # A store hiccup must not end reminders for good: waited out, reported to /health.
        await periodic("reminders", self.tick, every=self.interval, outages=self.outages)

    def due(self, approval: Approval, now: datetime) -> bool:
        """True when ``approval`` should be reminded of at ``now``."""
        at = approval.expires_at - self.before
        return (approval.status is ApprovalStatus.PENDING and approval.requested_at < at <= now
                < approval.expires_at and approval.id not in self._sent)

    def people(self, approval: Approval, task: Task | None) -> list[str]:
        """Everyone asked now, each once, in a stable order."""
        people = [*self.approvers, *approval.approvers]
        if task is not None and task.mode is RunMode.SCHEDULED and self.oncall is not None:
            people.extend(sorted(self.oncall()))
        return list(dict.fromkeys(people))

    async def tick(self) -> list[str]:
        """One round: queue every reminder that is due; return their approval ids."""
        now = self.clock.now()
        queued: list[str] = []
        pending: set[str] = set()
        cursor: str | None = None
        while True:
            page = await self.store.pending_requests(limit=100, cursor=cursor)
            for request in page.items:
                pending.add(request.approval.id)
                if self.due(request.approval, now):
                    await self._remind(request.approval, request.task, now)
                    queued.append(request.approval.id)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        self._sent &= pending  # forget the decided ones
        if queued and self.wake is not None:
            self.wake()
        return queued

    async def _remind(self, approval: Approval, task: Task | None, now: datetime) -> None:
        event = approval_event(ApprovalEvent.REMINDED, approval.id,
                               title=describe(approval.action),
                               left=time_left(approval.expires_at - now),
                               mentions=self.people(approval, task))
        # Several nodes (or this one before a restart) may queue it: the key keeps one.
        await self.store.commit(Change(at=now, outbox=[event]))
        self._sent.add(approval.id)
        log.info("approval_reminder_queued", extra={"approval_id": approval.id})
