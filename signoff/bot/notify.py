"""Team notifications: one concise line per task event, bursts folded into a digest.

`[[notify]]` rules name a channel (``slack:C123``, ``telegram:-100123``) and the events
it wants. Lines never carry message content (subjects, bodies, payloads, texts, file
content) unless the rule says ``include_content``, because a team channel is broader
than the approvers; then each piece is shortened to ``CONTENT_LIMIT`` characters.

A burst must not flood a channel (a nightly schedule failing ten tasks at once), so each
channel has a small buffer: the first event opens a window (default 3 s); when it closes,
`flush` writes ONE outbox item for the channel — the line itself if it was alone, else a
digest ("5 events:" and one line each). `run` closes windows on the Clock; tests call
`flush(now)` directly. The buffer is memory only: a crash can lose the last window's
lines, never a decision (those are in the audit log and on the cards).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from signoff.bot.cards import content_lines, describe, shorten
from signoff.runtime.clock import Clock
from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Action, ActionRecord, RunMode, Task
from signoff.runtime.outages import Outages, periodic
from signoff.runtime.refusals import outcome_words, refused_count
from signoff.runtime.store.port import Change, OutboxItem, TaskStore

log = logging.getLogger(__name__)

Names = Callable[[str], str]  # an actor key as people know it (`bot.names.Names.name`)

ICONS = {"queued": "📥", "started": "▶️", "auto_approved": "🤖", "waiting_approval": "⏳",
         "approved": "👍", "denied": "⛔",
         "expired": "⌛", "completed": "✅", "failed": "❌", "blocked": "🚫",
         "escalated": "📣", "skipped": "⏭", "refused": "⚠️"}
_ACTION_EVENTS = ("waiting_approval", "approved", "denied", "expired", "blocked", "escalated",
                  "auto_approved")
_DECIDED = ("approved", "denied")  # lines that name who decided
DIGEST_LIMIT = 20  # lines shown in one digest; the rest are counted
CONTENT_LIMIT = 200  # characters of each body, payload, ... with include_content (README)


@dataclass(frozen=True)
class NotifyRule:
    """One `[[notify]]` entry."""

    platform: str
    channel: str
    events: frozenset[str]
    include_content: bool = False


def event_line(kind: str, task: Task, detail: str | None, *, console_url: str | None,
               include_content: bool = False, names: Names = str) -> str:
    """The one line a channel sees for one event; ``names`` shows an actor key as people
    know it (``[[people]]``, else the chat name learned from the surface)."""
    icon = ICONS.get(kind, "•")
    label = kind.replace("_", " ")
    if kind == "completed" and refused_count(task.result):
        icon, label = ICONS["refused"], outcome_words(kind, task.result)  # never a plain ✅
    what = f"{icon} {label}: {shorten(task.goal, 80)}"
    if task.schedule:
        what += f" (schedule {task.schedule})"
    last = task.actions[-1] if task.actions else None
    if kind == "blocked" and last is not None and _blocked_by_cron_mode(task, last):
        what += _would_have_needed(last)
    elif kind == "blocked" and last is not None:
        what += f" — {_bare(last.tool, last.targets)}: {shorten(last.error or detail or '', 100)}"
    else:
        action = _action_of(kind, task)
        if kind in _ACTION_EVENTS and action is not None:
            what += " — " + (_with_content(action) if include_content
                             else _bare(action.tool, action.targets))
        decider = task.approval.decided_by if task.approval is not None else None
        if kind in _DECIDED and decider:
            what += f" — by {shorten(names(decider), 60)}"
        if detail and kind == "auto_approved":
            what += f" — by {shorten(detail, 120)}"
        if detail and kind in ("failed", "denied", "skipped", "escalated"):
            what += f" — {shorten(detail, 120)}"
    return f"{what} [{_link(task, console_url)}]"


def _action_of(kind: str, task: Task) -> Action | None:
    """The action an event is about: the one running for an automatic approval, else the
    one waiting or decided."""
    if kind == "auto_approved" and task.executing is not None:
        return task.executing
    return task.pending_action or (task.approval.action if task.approval else None)


def unattended_blocked_lines(task: Task, *, console_url: str | None) -> list[str]:
    """For a run that completed although `cron_mode` blocked some of its actions (an
    agent told to go on): the "blocked … would have needed approval" line of each, as a
    run of fixed steps gets when it stops there."""
    return [f"{ICONS['blocked']} blocked: {shorten(task.goal, 80)} (schedule {task.schedule})"
            f"{_would_have_needed(record)} [{_link(task, console_url)}]"
            for record in task.actions if _blocked_by_cron_mode(task, record)]


def _link(task: Task, console_url: str | None) -> str:
    return f"{console_url.rstrip('/')}/console/tasks/{task.id}" if console_url else task.id


def _would_have_needed(record: ActionRecord) -> str:
    """What a blocked unattended action needed, so someone can allow it next time."""
    targets = f" to {', '.join(record.targets)}" if record.targets else ""
    return (f" — would have needed approval: {record.tool}{targets}; "
            "set cron_mode or add a grant")


def _blocked_by_cron_mode(task: Task, record: ActionRecord) -> bool:
    return (task.mode is RunMode.SCHEDULED and record.outcome == "blocked"
            and record.decided_by == "auto:cron_mode")


def _with_content(action: Action) -> str:
    """The action in words followed by its content: `… — body: Hi team…`."""
    parts = [describe(action)]
    parts += [f"{name}: {text}" for name, text in content_lines(action, CONTENT_LIMIT)]
    return " — ".join(parts)


def _bare(tool: str, targets: Sequence[str]) -> str:
    return f"{tool} → {', '.join(targets)}" if targets else tool


def digest_text(lines: Sequence[str]) -> str:
    """One message for several events: a count, then one line each."""
    if len(lines) == 1:
        return lines[0]
    shown = list(lines[:DIGEST_LIMIT])
    if len(lines) > DIGEST_LIMIT:
        shown.append(f"… and {len(lines) - DIGEST_LIMIT} more")
    return f"{len(lines)} events:\n" + "\n".join(shown)


@dataclass
class _Window:
    opened: datetime
    lines: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


class Notifier:
    """Buffers event lines per channel and writes them to the outbox, folded."""

    def __init__(self, *, store: TaskStore, clock: Clock, rules: Sequence[NotifyRule],
                 console_url: str | None = None, window: timedelta = timedelta(seconds=3),
                 on_flush: Callable[[], None] | None = None, tick: float = 0.5,
                 outages: Outages | None = None, names: Names = str) -> None:
        self.store = store
        self.names = names  # who decided, as lines show them
        self.clock = clock
        self.rules = list(rules)
        self.console_url = console_url
        self.window = window  # 0: no folding, every event is written at once
        self.on_flush = on_flush  # e.g. Dispatcher.wake
        self.tick = tick
        # Where its loops' failures are reported (/health reads the node's engine's).
        self.outages = outages or Outages(clock)
        self._windows: dict[tuple[str, str], _Window] = {}

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """Add one line to every subscribed channel's window."""
        rules = [rule for rule in self.rules if kind in rule.events]
        if not rules:  # most events of most tasks: nothing to build (a hash, a clock read)
            return
        now = self.clock.now()
        # The key names the event, so the same event seen by two nodes (a schedule skip)
        # becomes one outbox row when it is alone in its window.
        event = f"{task.id}:{kind}:{task.version}:{_digest(detail or '')[:8]}"
        for rule in rules:
            lines = [event_line(kind, task, detail, console_url=self.console_url,
                                include_content=rule.include_content, names=self.names)]
            if kind == TaskEvent.COMPLETED:
                lines += unattended_blocked_lines(task, console_url=self.console_url)
            slot = self._windows.setdefault((rule.platform, rule.channel), _Window(opened=now))
            for n, text in enumerate(lines):
                slot.lines.append(text)
                slot.keys.append(event if n == 0 else f"{event}:blocked{n}")
        if self.window <= timedelta():
            await self.flush(now, force=True)

    async def post_audit_head(self, count: int, digest: str) -> int:
        """Post the audit chain's head to channels subscribed to ``audit_head``.

        Kept outside the database it describes, the head later proves that the log was
        not cut short (`signoff audit --verify --expect-head COUNT:HASH`). The key holds
        the UTC date: once a day per channel, however many nodes try.
        """
        day = self.clock.now().date().isoformat()
        text = (f"🔏 audit head {day}: {count}:{digest} — check with "
                f"`signoff audit --verify --expect-head {count}:{digest}`")
        items = [OutboxItem(key=f"audit_head:{day}:{rule.platform}:{rule.channel}",
                            surface=rule.platform, kind="notify",
                            payload={"channel": rule.channel, "text": text})
                 for rule in self.rules if "audit_head" in rule.events]
        if items:
            await self.store.commit(Change(at=self.clock.now(), outbox=items))
            if self.on_flush is not None:
                self.on_flush()
        return len(items)

    async def run_audit_head(self, every: float = 3600.0) -> None:
        """Offer the head hourly; the per-day key keeps it to one post a day."""
        async def offer() -> None:
            await self.post_audit_head(*await self.store.audit_head())

        await periodic("audit-head", offer, every=every, outages=self.outages)

    def pending(self) -> int:
        """Lines waiting in open windows."""
        return sum(len(w.lines) for w in self._windows.values())

    async def flush(self, now: datetime | None = None, *, force: bool = False) -> int:
        """Write every window that has closed by ``now`` (all, with ``force``); returns
        the number of outbox items written (one per channel)."""
        at = now or self.clock.now()
        due = [(target, w) for target, w in self._windows.items()
               if force or at - w.opened >= self.window]
        if not due:
            return 0
        items = []
        for (platform, channel), slot in due:
            del self._windows[(platform, channel)]
            if len(slot.keys) == 1:
                key = f"notify:{slot.keys[0]}:{platform}:{channel}"
            else:
                key = f"digest:{_digest(' '.join(slot.keys))[:24]}:{platform}:{channel}"
            items.append(OutboxItem(key=key, surface=platform, kind="notify",
                                    payload={"channel": channel,
                                             "text": digest_text(slot.lines)}))
        await self.store.commit(Change(at=at, outbox=items))
        if self.on_flush is not None:
            self.on_flush()
        return len(items)

    async def run(self) -> None:
        """Close windows as they expire, until cancelled; then write what is left."""
        try:
            await periodic("notify", self.flush, every=self.tick, outages=self.outages)
        finally:
            if self._windows:
                try:
                    await self.flush(force=True)
                except Exception:
                    log.exception("notify_flush_failed")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
