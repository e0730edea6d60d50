"""What an approval card says, as data built from an approval and its task.

Surfaces render `ApprovalCard`; they never look at tasks. Content that may be long or
secret (bodies, payloads, file content) is shortened here, once, for every surface.
"""

from __future__ import annotations

import json
from datetime import datetime

from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import Action, Approval, ApprovalStatus, Scope, Task

# The labels every surface puts on its buttons, in this order.
BUTTON_LABELS = {
    Scope.ONCE: "Once",
    Scope.SESSION: "Session",
    Scope.ALWAYS: "Always",
    Scope.DENY: "Deny",
}

# Arguments that carry message content: shown shortened, never part of a fingerprint.
CONTENT_ARGS = ("subject", "body", "payload", "text", "content")
SHORT = 120


def shorten(value: object, limit: int = SHORT) -> str:
    """One line, at most ``limit`` characters, with an ellipsis when cut."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _recipients(args: dict[str, object]) -> str:
    to = args.get("to")
    people = [to] if isinstance(to, str) else list(to) if isinstance(to, list) else []
    cc = args.get("cc")
    if isinstance(cc, str):
        people.append(cc)
    elif isinstance(cc, list):
        people.extend(cc)
    return ", ".join(str(p) for p in people) or "nobody"


def describe(action: Action) -> str:
    """The action in plain words, e.g. "Send email to john@example.com — subject 'Hi'"."""
    a = action.args
    tool = action.tool
    if tool == "send_email":
        text = f"Send email to {_recipients(a)}"
        if a.get("subject"):
            text += f" — subject '{shorten(a['subject'], 60)}'"
        return text
    if tool == "post_message":
        return f"Post a message to {a.get('channel', '?')}"
    if tool == "send_webhook":
        return f"POST a webhook to {a.get('url', '?')}"
    if tool == "delete_file":
        return f"Delete file {a.get('path', '?')}"
    if tool == "run_command":
        where = f" in {a['cwd']}" if a.get("cwd") else ""
        return f"Run command `{shorten(a.get('command', ''), 80)}`{where}"
    if tool == "write_file":
        return f"Write file {a.get('path', '?')}"
    if tool in ("read_file", "list_dir"):
        return f"Read {a.get('path', '?')}"
    if tool == "http_get":
        return f"Fetch {a.get('url', '?')}"
    targets = ", ".join(action.targets)
    return f"Run {tool}" + (f" on {targets}" if targets else "")


def content_lines(action: Action) -> tuple[tuple[str, str], ...]:
    """Shortened message content to show on a card (never in broad notifications),
    then what the tool itself asks to show (an MCP tool's arguments and server hints)."""
    own = tuple((label, shorten(text)) for label, text in action.details)
    if own:  # the tool names its own content arguments among them
        return own
    return tuple(
        (name, shorten(action.args[name])) for name in CONTENT_ARGS if action.args.get(name)
    )


_SCOPE_WORDS = {
    Scope.ONCE: "Approved once",
    Scope.SESSION: "Approved for this session",
    Scope.ALWAYS: "Approved always",
    Scope.DENY: "Denied",
}


def outcome_line(approval: Approval) -> str | None:
    """"Approved for this session by slack:U1 at 14:03 UTC", or None while pending."""
    if approval.status is ApprovalStatus.PENDING:
        return None
    when = _hhmm(approval.decided_at)
    if approval.status is ApprovalStatus.EXPIRED:
        return f"Expired — denied at {when}"
    words = _SCOPE_WORDS.get(approval.scope or Scope.DENY, "Decided")
    who = approval.decided_by or "someone"
    line = f"{words} by {who} at {when}"
    if approval.status is ApprovalStatus.DENIED and approval.reason:
        line += f": {shorten(approval.reason, 80)}"
    return line


def _hhmm(at: datetime | None) -> str:
    return at.strftime("%H:%M UTC") if at else "?"


def build_card(task: Task, approval: Approval, *, console_url: str | None = None,
               mentions: tuple[str, ...] = ()) -> ApprovalCard:
    """The card for one approval request of one task."""
    action = approval.action
    total = len(task.steps or []) or 1
    return ApprovalCard(
        approval_id=approval.id,
        task_id=task.id,
        title=describe(action),
        tool=action.tool,
        risk=action.risk.value if action.risk else "SEND",
        capability=action.capability or "",
        targets=tuple(action.targets),
        goal=shorten(task.goal, 200),
        schedule=task.schedule,
        step=approval.step + 1,
        steps_total=max(total, approval.step + 1),
        details=content_lines(action),
        allowed=tuple(approval.allowed_scopes),
        requested_at=approval.requested_at,
        expires_at=approval.expires_at,
        status=approval.status.value,
        outcome=outcome_line(approval),
        decided_by=approval.decided_by,
        decided_at=approval.decided_at,
        note=approval.note,
        mentions=mentions,
        console_url=f"{console_url.rstrip('/')}/console/tasks/{task.id}" if console_url else None,
    )
