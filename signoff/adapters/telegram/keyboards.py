"""Approval cards as Telegram messages: HTML text, inline keyboards, callback data.

Pure functions only, so the rendering is testable without a bot. Everything that comes
from a task (goal, targets, content) is escaped with `html.escape`: the message is sent
with ``parse_mode=HTML`` and Telegram refuses the whole message on an unknown tag.

Callback data is ``so:<approval_id>:<o|s|a|d>`` (``:u``: the Undo of a held card).
Telegram allows 1–64 bytes and python-telegram-bot does not check, so `encode_callback`
does; the details of a request live in the store, never in the button.
"""

from __future__ import annotations

import html
import sys
from datetime import datetime

from signoff.bot.cards import (  # one wording and one completeness rule for every surface
    BUTTON_LABELS,
    UNDO_LABEL,
    complete,
    console_only_text,
    why_line,
)
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import Scope

CALLBACK_PREFIX = "so"
MAX_CALLBACK_BYTES = 64  # Bot API limit for InlineKeyboardButton.callback_data
MAX_TEXT = 4096  # Bot API limit for a message text

_CODES: dict[Scope, str] = {
    Scope.ONCE: "o",
    Scope.SESSION: "s",
    Scope.ALWAYS: "a",
    Scope.DENY: "d",
}
_SCOPES_BY_CODE = {code: scope for scope, code in _CODES.items()}
UNDO_CODE = "u"

_RISK_MARK = {"READ": "🟢", "DRAFT": "🟡", "SEND": "🟠", "DESTRUCTIVE": "🔴"}
_STATUS_MARK = {"approved": "✅", "held": "⏳", "denied": "⛔", "expired": "⌛", "withdrawn": "↩️"}

# Per-field length budgets, tried in order until the message fits in MAX_TEXT. Cards are
# already shortened in bot/cards.py; this is the last guard against odd data.
_BUDGETS = ((400, 20), (160, 8), (60, 3))
# Characters of a preview (diff, command) kept at each budget step above, in order.
_PREVIEW_BUDGETS = {400: 2600, 160: 1200, 60: 300}

# What a card approves (targets, content, preview) is shown whole or not decided here: at
# most this much of it (`cards.shown_size`), leaving the rest of MAX_TEXT to the title,
# goal and the other lines at their smallest budget.
CARD_LIMIT = 2800

Keyboard = list[list[tuple[str, str]]]


def encode_callback(approval_id: str, scope: Scope) -> str:
    """``so:<approval_id>:<code>``; ValueError if it would not fit in 64 bytes."""
    if not approval_id:
        raise ValueError("approval id is empty")
    data = f"{CALLBACK_PREFIX}:{approval_id}:{_CODES[scope]}"
    size = len(data.encode("utf-8"))
    if size > MAX_CALLBACK_BYTES:
        raise ValueError(
            f"callback data for approval {approval_id!r} is {size} bytes; "
            f"Telegram allows at most {MAX_CALLBACK_BYTES}"
        )
    return data


def decode_callback(data: str | None) -> tuple[str, Scope] | None:
    """The approval id and scope in a button's data, or None when it is not ours."""
    if not data or len(data.encode("utf-8")) > MAX_CALLBACK_BYTES:
        return None
    prefix, sep, rest = data.partition(":")
    if prefix != CALLBACK_PREFIX or not sep:
        return None
    # rpartition: the decision code is last, so an id may itself contain ':'.
    approval_id, sep, code = rest.rpartition(":")
    scope = _SCOPES_BY_CODE.get(code)
    if not sep or not approval_id or scope is None:
        return None
    return approval_id, scope


def decode_undo(data: str | None) -> str | None:
    """The approval id of an Undo button's data (``so:<id>:u``), else None."""
    if not data or len(data.encode("utf-8")) > MAX_CALLBACK_BYTES:
        return None
    prefix, sep, rest = data.partition(":")
    approval_id, sep2, code = rest.rpartition(":")
    if prefix != CALLBACK_PREFIX or not sep or not sep2 or not approval_id or code != UNDO_CODE:
        return None
    return approval_id


def decides(card: ApprovalCard) -> bool:
    """True when the Telegram card offers decisions: not under step-up, and it shows
    whole what the decision approves (`cards.complete` within CARD_LIMIT, and the
    message with it fits)."""
    return not card.step_up and _fitted(card)[1]


def card_keyboard(card: ApprovalCard) -> Keyboard:
    """One row of (label, callback data) for the allowed decisions; Undo while held;
    empty once decided, and for a card decided in the console (step-up, or too long to
    show whole: its only button is `console_button`)."""
    if card.held:
        data = f"{CALLBACK_PREFIX}:{card.approval_id}:{UNDO_CODE}"
        return [[(UNDO_LABEL, data)]] if len(data.encode()) <= MAX_CALLBACK_BYTES else []
    if not card.open or not decides(card):
        return []
    row = [(BUTTON_LABELS[s], encode_callback(card.approval_id, s)) for s in card.allowed]
    return [row] if row else []


def console_button(card: ApprovalCard) -> tuple[str, str] | None:
    """(label, url) of the URL button to its console page of a pending card decided
    there (step-up, or too long to show whole here)."""
    if not card.open or decides(card) or not card.confirm_url:
        return None
    return "Open in console to decide", card.confirm_url


def card_html(card: ApprovalCard) -> str:
    """The card as Telegram HTML, at most 4096 characters."""
    return _fitted(card)[0]


def _fitted(card: ApprovalCard) -> tuple[str, bool]:
    """The card's HTML, and whether it shows whole what the decision approves: tried
    whole first (when `cards.complete`), the other lines shrinking to fit; else cut."""
    for whole in (True, False) if complete(card, CARD_LIMIT) else (False,):
        for field_limit, list_limit in _BUDGETS:
            text = _render(card, field_limit, list_limit, whole=whole)
            if len(text) <= MAX_TEXT:
                return text, whole
    # Unreachable with sane budgets; cut plain text rather than break a tag.
    return html.escape(_cut(card.title, MAX_TEXT // 8)), False


def _cut(value: str, limit: int) -> str:
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _e(value: str, limit: int) -> str:
    return html.escape(_cut(value, limit))


def _hhmm(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _render(card: ApprovalCard, limit: int, items: int, *, whole: bool) -> str:
    risk = card.risk.upper()
    head = "Approval needed" if card.open else "Decided"
    lines = [
        f"{_RISK_MARK.get(risk, '⚪')} <b>{head}</b> · <b>{_e(risk, 20)}</b> · "
        f"<code>{_e(card.tool, 60)}</code>",
        f"<b>{_e(card.title, limit)}</b>",
    ]
    lines.extend(_approvable(card, limit, items, whole=whole))
    why = why_line(card)
    if why:
        lines.append(f"<i>{_e(why, limit)}</i>")
    if card.goal:
        lines.append(f"Goal: {_e(card.goal, limit)}")
    if card.task_id is None:  # a request from an agent that is not ours
        lines.append(f"Asked by <b>{_e(card.requester or 'an outside agent', 120)}</b> · "
                     f"policy <code>{_e(card.policy_id or '', 80)}</code>")
    else:
        task = f"Task <code>{_e(card.task_id, 80)}</code> · step {card.step}/{card.steps_total}"
        if card.schedule:
            task += f" · schedule <code>{_e(card.schedule, 80)}</code>"
        lines.append(task)
    if card.note:
        lines.append(f"Note: {_e(card.note, limit)}")
    if card.open and card.progress:
        lines.append(f"<b>{_e(card.progress, limit)}</b>")
    if card.open:
        lines.append(f"Expires {_hhmm(card.expires_at)} · request "
                     f"<code>{_e(card.approval_id, 80)}</code>")
    if card.open and (card.step_up or not whole):
        lines.append(html.escape(console_only_text(card)))
    if card.console_url:
        url = html.escape(card.console_url, quote=True)
        lines.append(f'<a href="{url}">Open in console</a>')
    mentions = _mentions(card.mentions[:items])
    if mentions and card.open:
        lines.append(f"Waiting for {mentions}")
    if card.outcome:
        mark = _STATUS_MARK.get(card.status, "•")
        lines.append(f"{mark} <b>{_e(card.outcome, limit)}</b>")
    return "\n".join(lines)


def _approvable(card: ApprovalCard, limit: int, items: int, *, whole: bool) -> list[str]:
    """Targets, content and preview: all of each when ``whole``, else within budget."""
    if whole:
        limit = items = sys.maxsize
    lines = []
    if card.targets:
        shown = ", ".join(f"<code>{_e(t, limit)}</code>" for t in card.targets[:items])
        more = len(card.targets) - items
        lines.append(f"Targets: {shown}" + (f" and {more} more" if more > 0 else ""))
    lines.extend(f"{_e(label, 40 if not whole else limit)}: <i>{_e(value, limit)}</i>"
                 for label, value in card.details[:items])
    preview = _preview(card, limit if whole else _PREVIEW_BUDGETS.get(limit, 300),
                       label=limit if whole else 200)
    if preview:
        lines.append(preview)
    return lines


def _preview(card: ApprovalCard, limit: int, *, label: int) -> str | None:
    """The preview as a <pre> block, line breaks kept (never `_cut`, which joins lines),
    escaped; cut to ``limit`` characters with a note when the message needs the room."""
    if card.preview is None:
        return None
    text = card.preview.text
    if len(text) > limit:
        text = text[:limit].rsplit("\n", 1)[0] + "\n… (cut to fit Telegram)"
    return f"<b>{_e(card.preview.label, label)}</b>\n<pre>{html.escape(text)}</pre>"


def _mentions(keys: tuple[str, ...]) -> str:
    """Telegram approvers as user links (a tap opens the profile and pings them)."""
    links = []
    for key in keys:
        platform, _, user_id = key.partition(":")
        if platform == "telegram" and user_id.isdigit():
            links.append(f'<a href="tg://user?id={user_id}">{user_id}</a>')
    return ", ".join(links)
