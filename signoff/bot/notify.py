"""Team notifications: one concise line per task event to the channels that asked for it.

`[[notify]]` rules name a channel (``slack:C123``, ``telegram:-100123``) and the events
it wants. Lines never carry message content (bodies, payloads) unless the rule says
``include_content``, because a team channel is broader than the approvers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from signoff.bot.cards import describe, shorten
from signoff.runtime.clock import Clock
from signoff.runtime.models import Task
from signoff.runtime.store import Change, OutboxItem, TaskStore

ICONS = {"queued": "📥", "waiting_approval": "⏳", "approved": "👍", "denied": "⛔",
         "expired": "⌛", "completed": "✅", "failed": "❌", "blocked": "🚫",
         "escalated": "📣", "skipped": "⏭"}


@dataclass(frozen=True)
class NotifyRule:
    """One `[[notify]]` entry."""

    platform: str
    channel: str
    events: frozenset[str]
    include_content: bool = False


def event_line(kind: str, task: Task, detail: str | None, *, console_url: str | None,
               include_content: bool = False) -> str:
    """The one line a channel sees for one event."""
    icon = ICONS.get(kind, "•")
    what = f"{icon} {kind.replace('_', ' ')}: {shorten(task.goal, 80)}"
    if task.schedule:
        what += f" (schedule {task.schedule})"
    action = task.pending_action or (task.approval.action if task.approval else None)
    if kind in ("waiting_approval", "approved", "denied", "expired", "blocked") and action:
        what += f" — {describe(action) if include_content else _bare(action.tool, action.targets)}"
    if kind == "blocked" and task.mode.value == "scheduled" and task.actions:
        last = task.actions[-1]
        what += (f" — would have needed approval: {last.tool} to {', '.join(last.targets)}; "
                 "set cron_mode or add a grant")
    elif detail and kind in ("failed", "denied"):
        what += f" — {shorten(detail, 100)}"
    link = f"{console_url.rstrip('/')}/tasks/{task.id}" if console_url else task.id
    return f"{what} [{link}]"


def _bare(tool: str, targets: Sequence[str]) -> str:
    return f"{tool} → {', '.join(targets)}" if targets else tool


class Notifier:
    """Queues notification jobs in the outbox for the channels that subscribed."""

    def __init__(self, *, store: TaskStore, clock: Clock, rules: Sequence[NotifyRule],
                 console_url: str | None = None) -> None:
        self.store = store
        self.clock = clock
        self.rules = list(rules)
        self.console_url = console_url

    async def task_event(self, kind: str, task: Task, detail: str | None = None) -> None:
        """Queue one line per subscribed channel."""
        items = []
        for rule in self.rules:
            if kind not in rule.events:
                continue
            text = event_line(kind, task, detail, console_url=self.console_url,
                              include_content=rule.include_content)
            items.append(OutboxItem(
                key=f"notify:{task.id}:{kind}:{task.version}:{rule.platform}:{rule.channel}",
                surface=rule.platform, kind="notify",
                payload={"channel": rule.channel, "text": text}))
        if items:
            await self.store.commit(Change(outbox=items))
