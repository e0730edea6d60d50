"""An `ApprovalCard` as a Slack Block Kit message: pure functions, no network.

`card_blocks` gives the ``blocks`` of ``chat.postMessage``/``chat.update``; `card_text` the
``text`` Slack shows in notifications and to clients that cannot draw blocks. Every piece
of text is clipped to Slack's per-field limits here, so a long goal or body can never make
Slack refuse the whole message (``invalid_blocks``).

Buttons carry the approval id as their ``value`` and ``signoff_<scope>`` as their
``action_id``; `ACTION_PREFIX` and `scope_of_action` are the other half of that format.
A held card (approved, in its undo window) has one button, `UNDO_ACTION`.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from signoff.bot.cards import (
    BUTTON_LABELS,
    UNDO_LABEL,
    console_only_text,
    decides_here,
    why_line,
)
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import Scope

Block = dict[str, Any]

ACTION_PREFIX = "signoff_"
ACTIONS_BLOCK_ID = "signoff_decide"
# The only button of a card decided in the console (step-up, or too long to show whole
# here): a link (Slack opens it; the click it also reports is acked and ignored).
CONSOLE_ACTION = f"{ACTION_PREFIX}console"
UNDO_ACTION = "signoff_undo"

# Slack's documented limits (Block Kit reference).
MAX_BLOCKS = 50
MAX_TEXT = 3000  # section/context text object
MAX_HEADER = 150  # header plain_text
MAX_CONFIRM_TITLE = 100
MAX_CONFIRM_TEXT = 300
MAX_CONTEXT_ELEMENTS = 10
MAX_TITLE = 250  # the action in words (escaped); what it approves is in targets, preview
MAX_TOOL = 100
# What a card approves (targets, content, preview) is shown whole or not decided here:
# at most this much of it (`cards.shown_size`), so that each of the sections holding it
# stays under MAX_TEXT with the title and labels beside it.
CARD_LIMIT = 2400

_RISK_ICON = {"READ": "📖", "DRAFT": "📝", "SEND": "📤", "DESTRUCTIVE": "🧨"}
_STATUS_ICON = {"approved": "✅", "held": "⏳", "denied": "⛔", "expired": "⌛", "withdrawn": "↩️"}
_SLACK_ACTOR = re.compile(r"\bslack:([UW][A-Z0-9]{2,})\b")


def action_id(scope: Scope) -> str:
    """The ``action_id`` of the button for ``scope``."""
    return f"{ACTION_PREFIX}{scope.value}"


def scope_of_action(value: str) -> Scope | None:
    """The scope a button's ``action_id`` stands for, or None if it is not one of ours."""
    if not value.startswith(ACTION_PREFIX):
        return None
    try:
        return Scope(value[len(ACTION_PREFIX) :])
    except ValueError:
        return None


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(text: str) -> str:
    """Escape the three characters mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escaped(text: str, limit: int) -> str:
    """``text`` escaped, clipped so that the escaped form is at most ``limit`` characters
    (cut in the text, never through an entity): "&" is five characters once escaped."""
    raw = clip(text, limit)
    body = escape(raw)
    while len(body) > limit:
        raw = clip(raw, max(1, len(raw) * limit // len(body)))
        body = escape(raw)
    return body


def mention(actor_key: str) -> str | None:
    """``slack:U123`` → ``<@U123>``; None for people on other surfaces."""
    # Only well-formed member ids: the result goes into mrkdwn unescaped.
    found = _SLACK_ACTOR.fullmatch(actor_key)
    return f"<@{found.group(1)}>" if found else None


def person(actor_key: str) -> str:
    """A Slack member as a mention that notifies them; anyone else by their key."""
    return mention(actor_key) or escape(actor_key)


def _with_mentions(text: str) -> str:
    """Escaped text in which ``slack:U…`` actor keys become real Slack mentions."""
    return _SLACK_ACTOR.sub(r"<@\1>", escape(text))


def _when(at: datetime) -> str:
    """A date Slack shows in each reader's own time zone, with a UTC fallback."""
    fallback = at.strftime("%H:%M UTC")
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": clip(text, limit), "emoji": True}


def _mrkdwn(text: str, limit: int = MAX_TEXT) -> dict[str, Any]:
    # verbatim: Slack does not turn a URL, #channel or @here in agent text into a link or
    # a mention; our own <url|label>, <@U…> and <!date…> markup still renders.
    return {"type": "mrkdwn", "text": clip(text, limit), "verbatim": True}


def _header(card: ApprovalCard) -> Block:
    icon = _RISK_ICON.get(card.risk, "❓")
    words = "needs approval" if card.open else "approval request"
    return {"type": "header", "text": _plain(f"{icon} {card.risk} — {words}", MAX_HEADER)}


def _action_section(card: ApprovalCard) -> Block:
    lines = [f"*{_escaped(card.title, MAX_TITLE)}*"]
    if card.targets:
        targets = ", ".join(f"`{escape(t)}`" for t in card.targets)
        lines.append(f"Targets: {targets}")
    lines.append(f"Tool: `{_escaped(card.tool, MAX_TOOL)}`" + (
        f" ({_escaped(card.capability, MAX_TOOL)})" if card.capability else ""))
    return {"type": "section", "text": _mrkdwn("\n".join(lines))}


def _details_section(card: ApprovalCard) -> Block | None:
    if not card.details:
        return None
    lines = [f"*{escape(label)}:* {escape(value)}" for label, value in card.details]
    return {"type": "section", "text": _mrkdwn("\n".join(lines))}


def _preview_section(card: ApprovalCard) -> Block | None:
    """What the action will do (a diff, the whole command) as a code block; the text was
    bounded when it was made, so only a very odd one is clipped here (and says so)."""
    if card.preview is None:
        return None
    head = f"*{escape(card.preview.label)}*\n```"
    room = MAX_TEXT - len(head) - len("\n```") - 1
    raw = card.preview.text
    body = escape(raw)
    while len(body) > room:  # cut the text, not its escapes (no half "&amp;")
        raw = raw[: max(0, len(raw) * room // len(body) - 12)]
        body = escape(raw) + "\n… (cut)"
    # An empty code block renders as three backticks: show a word instead.
    return {"type": "section", "text": _mrkdwn(f"{head}{body or ' '}```")}


def _context(card: ApprovalCard) -> Block:
    if card.task_id is None:  # a request from an agent that is not ours
        who = escape(card.requester or "an outside agent")
        parts = [f"Asked by *{who}* · policy `{escape(card.policy_id or '')}`"]
        if card.goal:
            parts.append(f"Goal: {escape(card.goal)}")
    else:
        parts = [f"Task `{escape(card.task_id)}`: {escape(card.goal)}"]
        if card.schedule:
            parts.append(f"Schedule: {escape(card.schedule)}")
        parts.append(f"Step {card.step}/{card.steps_total}")
    if card.open and card.progress:
        parts.append(f"*{escape(card.progress)}*")
    if card.open:
        parts.append(f"Expires {_when(card.expires_at)}")
    if card.console_url:
        parts.append(f"<{escape(card.console_url)}|Open in console>")
    elements = [_mrkdwn(p) for p in parts[:MAX_CONTEXT_ELEMENTS]]
    return {"type": "context", "elements": elements}


def _confirm(card: ApprovalCard, scope: Scope) -> dict[str, Any]:
    if scope is Scope.ALWAYS:
        whose = ("schedule" if card.schedule else "task" if card.task_id
                 else f"policy {escape(card.policy_id or '')}")
        question = ("Approve this action now *and from now on* for this "
                    f"{whose}, without asking again?")
    else:
        question = "This action is *DESTRUCTIVE* and may not be undoable. Approve it?"
    return {
        "title": _plain(f"{BUTTON_LABELS[scope]}: are you sure?", MAX_CONFIRM_TITLE),
        "text": _mrkdwn(f"{question}\n{escape(card.title)}", MAX_CONFIRM_TEXT),
        "confirm": _plain(f"Yes, {BUTTON_LABELS[scope].lower()}", 30),
        "deny": _plain("Cancel", 30),
        "style": "danger" if card.risk == "DESTRUCTIVE" else "primary",
    }


def _button(card: ApprovalCard, scope: Scope) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action_id(scope),
        "text": _plain(BUTTON_LABELS[scope], 75),
        "value": card.approval_id,
    }
    if scope is Scope.DENY:
        button["style"] = "danger"
    elif scope is Scope.ONCE:
        button["style"] = "primary"
    # A misclick on Always outlives the task, and one on a DESTRUCTIVE action cannot be
    # taken back: both get a second question. Deny is always safe to press.
    if scope is Scope.ALWAYS or (scope.approves and card.risk == "DESTRUCTIVE"):
        button["confirm"] = _confirm(card, scope)
    return button


def decides(card: ApprovalCard) -> bool:
    """True when the Slack card offers decision buttons: not under step-up, and what the
    decision approves fits whole (`cards.decides_here` within CARD_LIMIT)."""
    return decides_here(card, CARD_LIMIT)


def _console_only(card: ApprovalCard, blocks: list[Block]) -> list[dict[str, Any]]:
    """A card decided in the console (step-up, or too long to show whole here) says so and
    links there, with no decision button."""
    blocks.append({"type": "context", "elements": [_mrkdwn(console_only_text(card))]})
    if not card.confirm_url:
        return []
    return [{"type": "button", "action_id": CONSOLE_ACTION,
             "text": _plain("Open in console to decide", 75), "url": card.confirm_url,
             "value": card.approval_id}]


def _outcome(card: ApprovalCard) -> Block:
    icon = _STATUS_ICON.get(card.status, "ℹ️")
    text = card.outcome or f"{card.status.capitalize()}"
    line = f"{icon} *{_with_mentions(text)}*"
    if card.note:
        line += f"\n{escape(card.note)}"
    return {"type": "section", "text": _mrkdwn(line)}


def _mentions(card: ApprovalCard) -> str:
    return " ".join(m for m in (mention(key) for key in card.mentions) if m)


def card_blocks(card: ApprovalCard) -> list[Block]:
    """The Block Kit blocks of ``card``: buttons while open, the outcome once decided."""
    blocks: list[Block] = [_header(card)]
    people = _mentions(card)
    if people and card.open:
        blocks.append({"type": "section", "text": _mrkdwn(f"{people} your answer is needed")})
    blocks.append(_action_section(card))
    details = _details_section(card)
    if details is not None:
        blocks.append(details)
    preview = _preview_section(card)
    if preview is not None:
        blocks.append(preview)
    why = why_line(card)
    if why:
        blocks.append({"type": "context", "elements": [_mrkdwn(escape(why))]})
    blocks.append(_context(card))
    if card.open:
        if card.note:
            blocks.append({"type": "context", "elements": [_mrkdwn(escape(card.note))]})
        buttons = [_button(card, scope) for scope in card.allowed] \
            if decides(card) else _console_only(card, blocks)
        if buttons:
            blocks.append({"type": "actions", "block_id": ACTIONS_BLOCK_ID, "elements": buttons})
    else:
        blocks.append(_outcome(card))
        if card.held:
            undo = {"type": "button", "action_id": UNDO_ACTION, "value": card.approval_id,
                    "text": _plain(UNDO_LABEL, 75), "style": "danger"}
            blocks.append({"type": "actions", "block_id": ACTIONS_BLOCK_ID,
                           "elements": [undo]})
    return blocks[:MAX_BLOCKS]


def card_text(card: ApprovalCard) -> str:
    """The plain fallback text: what a phone notification or a screen reader says."""
    if card.open:
        text = f"Approval needed ({escape(card.risk)}): {escape(card.title)}"
        if card.progress:
            text += f" — {escape(card.progress)}"
        people = _mentions(card)
        if people:
            text = f"{people} {text}"
    else:
        text = f"{escape(card.title)} — {_with_mentions(card.outcome or card.status)}"
    return clip(text, MAX_TEXT)
