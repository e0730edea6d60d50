"""An `ApprovalCard` as a Discord message: an embed and a row of buttons. Pure functions.

`card_message` gives the JSON body of ``POST /channels/{id}/messages`` and of the PATCH
that edits it. Everything a task or an agent wrote is escaped for Discord's markdown
(`escape`) and every message carries ``allowed_mentions`` naming exactly who may be
pinged — nobody, unless signoff itself mentions an approver — so a goal saying
``@everyone`` or ``<@123>`` pings no one.

What a decision approves (every target, content line and the preview) is shown whole or
the card offers no approving button: `_fitted` tries it whole first, the other lines
shrinking to fit the embed, and says whether it managed; `decides` and the buttons both
ask it. A card it had to cut says so and carries Deny and a link to the console.

A button's ``custom_id`` is ``so:<approval_id>:<o|s|a|d>`` (``:u``: the Undo of a held
card), at most 100 characters as Discord allows; `decode_custom_id` is the other half.
The request's details live in the store, never in the button.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from signoff.bot.cards import BUTTON_LABELS, UNDO_LABEL, complete, console_only_text, why_line
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import Scope

Json = dict[str, Any]

SURFACE = "discord"
CUSTOM_ID_PREFIX = "so"
MAX_CUSTOM_ID = 100  # Discord's limit for a component's custom_id
MAX_CONTENT = 2000  # message content
MAX_TITLE = 256  # embed title
MAX_DESCRIPTION = 4096  # embed description
# Per-field length and list budgets for the lines around what a card approves, tried in
# order until the embed fits; when even the last cannot hold the approvable texts whole,
# they too are cut to them (preview: the characters kept at each step) and no approving
# button is offered.
_BUDGETS = ((400, 20), (160, 8), (60, 3))
_PREVIEW_BUDGETS = {400: 1500, 160: 800, 60: 300}

# Component types and button styles of the Discord API.
ACTION_ROW, BUTTON = 1, 2
PRIMARY, SECONDARY, SUCCESS, DANGER, LINK = 1, 2, 3, 4, 5

_CODES = {Scope.ONCE: "o", Scope.SESSION: "s", Scope.ALWAYS: "a", Scope.DENY: "d"}
_SCOPES = {code: scope for scope, code in _CODES.items()}
UNDO_CODE = "u"
_STYLES = {Scope.ONCE: SUCCESS, Scope.SESSION: PRIMARY, Scope.ALWAYS: SECONDARY,
           Scope.DENY: DANGER}
_RISK_ICON = {"READ": "📖", "DRAFT": "📝", "SEND": "📤", "DESTRUCTIVE": "🧨"}
_STATUS_ICON = {"approved": "✅", "held": "⏳", "denied": "⛔", "expired": "⌛"}
_COLOURS = {"pending": 0xF0B232, "held": 0xF0B232, "approved": 0x23A55A,
            "denied": 0xDA373C, "expired": 0x80848E}
# Markdown's control characters, and "<" / ">" which start mentions, emoji and timestamps.
_MARKDOWN = re.compile(r"([\\*_~`|<>\[\]#])")
_MASS_MENTION = re.compile(r"@(everyone|here)")
_URL = re.compile(r"(https?://[^\s<>\\]+)")
_DISCORD_ACTOR = re.compile(r"\bdiscord:(\d{1,20})\b")


def encode_custom_id(approval_id: str, code: str) -> str:
    """``so:<approval_id>:<code>``; ValueError when it would not fit Discord's 100."""
    if not approval_id:
        raise ValueError("approval id is empty")
    custom_id = f"{CUSTOM_ID_PREFIX}:{approval_id}:{code}"
    if len(custom_id) > MAX_CUSTOM_ID:
        raise ValueError(f"custom_id for approval {approval_id!r} is {len(custom_id)} "
                         f"characters; Discord allows at most {MAX_CUSTOM_ID}")
    return custom_id


def decode_custom_id(custom_id: object) -> tuple[str, Scope, bool] | None:
    """(approval id, scope, is undo) of one of our buttons' ``custom_id``, else None."""
    if not isinstance(custom_id, str) or len(custom_id) > MAX_CUSTOM_ID:
        return None
    prefix, sep, rest = custom_id.partition(":")
    approval_id, sep2, code = rest.rpartition(":")  # the code is last; an id may hold ':'
    if prefix != CUSTOM_ID_PREFIX or not sep or not sep2 or not approval_id:
        return None
    if code == UNDO_CODE:
        return approval_id, Scope.DENY, True
    scope = _SCOPES.get(code)
    return None if scope is None else (approval_id, scope, False)


def nonce(approval_id: str) -> str:
    """The ``nonce`` a card is posted with (25 characters at most, as Discord allows):
    with ``enforce_nonce`` Discord answers a repeated post of it with the first message
    instead of creating a second one."""
    return "so" + hashlib.sha256(approval_id.encode()).hexdigest()[:23]


def is_card_of(message: object, approval_id: str, bot_id: str | None) -> bool:
    """True when ``message`` (as Discord returns it) is one of our cards of ``approval_id``
    that still has its buttons: a copy whose clicks would still count."""
    if not isinstance(message, dict) or message.get("message_reference"):
        return False
    author = message.get("author")
    if bot_id is not None and (not isinstance(author, dict) or author.get("id") != bot_id):
        return False
    prefix = f"{CUSTOM_ID_PREFIX}:{approval_id}:"
    rows = message.get("components")
    return any(isinstance(button, dict) and str(button.get("custom_id", "")).startswith(prefix)
               for row in (rows if isinstance(rows, list) else []) if isinstance(row, dict)
               for button in row.get("components") or [])


def escape(text: str) -> str:
    """Text shown as written: markdown characters escaped, mass mentions defused; a URL
    is left whole, since a backslash inside one would change where it leads."""
    parts = _URL.split(text)  # odd indexes are the URLs
    return "".join(part if i % 2 else _escape_words(part) for i, part in enumerate(parts))


def _escape_words(text: str) -> str:
    return _MASS_MENTION.sub("@\u200b\\1", _MARKDOWN.sub(r"\\\1", text))


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line(text: str, limit: int = 400) -> str:
    """One escaped line: whitespace collapsed, so no value starts a markdown line."""
    return escape(clip(" ".join(text.split()), limit))


def user_ids(keys: Iterable[str]) -> list[str]:
    """The Discord user ids among actor keys (``discord:123``), in order, once each."""
    found: list[str] = []
    for key in keys:
        platform, _, user_id = key.partition(":")
        if platform == SURFACE and user_id.isdigit() and user_id not in found:
            found.append(user_id)
    return found


def person(key: str) -> str:
    """A Discord user as a mention (``<@123>``); anyone else by their escaped key."""
    platform, _, user_id = key.partition(":")
    return f"<@{user_id}>" if platform == SURFACE and user_id.isdigit() else escape(key)


def allowed_mentions(users: Sequence[str] = ()) -> Json:
    """Nobody may be pinged but ``users`` (ids): never @everyone, roles or parsed text."""
    return {"parse": [], "users": list(users)[:100]}


def _with_people(text: str) -> str:
    """Escaped text in which ``discord:<id>`` actor keys become mentions (shown as names;
    an embed pings nobody)."""
    return _DISCORD_ACTOR.sub(r"<@\1>", escape(text))


def decides(card: ApprovalCard) -> bool:
    """True when the Discord card offers approving buttons: not under step-up, and it
    shows whole what the decision approves (`_fitted`)."""
    return not card.step_up and _fitted(card)[1]


def _fitted(card: ApprovalCard) -> tuple[str, bool]:
    """The embed's description, and whether it shows whole what the decision approves:
    tried whole first (when the card carries it uncut, `cards.complete`), the other lines
    shrinking to fit; else cut to the budgets, saying so."""
    for whole in (True, False) if complete(card, None) else (False,):
        for limit, items in _BUDGETS:
            text = _description(card, limit, items, whole=whole)
            if len(text) <= MAX_DESCRIPTION:
                return text, whole
    return clip(_description(card, 60, 3, whole=False), MAX_DESCRIPTION), False


def _approvable(card: ApprovalCard, limit: int, items: int, *, whole: bool) -> list[str]:
    """Targets, content and preview: all of each when ``whole``, else within budget, with
    what is left out counted."""
    if whole:
        limit = items = sys.maxsize
    lines = []
    if card.targets:
        more = len(card.targets) - items
        lines.append("Targets: " + ", ".join(_line(t, limit) for t in card.targets[:items])
                     + (f" and {more} more" if more > 0 else ""))
    named = limit if whole else 80  # an outside request names its own tool
    tool = f"Tool: {_line(card.tool, named)}"
    lines.append(tool + (f" ({_line(card.capability, named)})" if card.capability else ""))
    label = limit if whole else 40
    lines += [f"**{_line(name, label)}:** {_line(value, limit)}"
              for name, value in card.details[:items]]
    more = len(card.details) - items
    if more > 0:
        lines.append(f"… and {more} more")
    lines += _preview(card, limit if whole else _PREVIEW_BUDGETS.get(limit, 300),
                      label=limit if whole else 200)
    return lines


def _preview(card: ApprovalCard, limit: int, *, label: int) -> list[str]:
    if card.preview is None:
        return []
    text = card.preview.text
    if len(text) > limit:
        text = text[:limit].rsplit("\n", 1)[0] + "\n… (cut to fit Discord)"
    # A fence inside would end the code block early; a zero-width space breaks it.
    return [f"**{_line(card.preview.label, label)}**",
            "```\n" + text.replace("```", "`\u200b``") + "\n```"]


def _origin(card: ApprovalCard, limit: int) -> list[str]:
    if card.task_id is None:  # a request from an agent that is not ours
        lines = [f"Asked by **{_line(card.requester or 'an outside agent', 120)}** · "
                 f"policy {_line(card.policy_id or '', 80)}"]
    else:
        task = f"Task {_line(card.task_id, 80)} · step {card.step}/{card.steps_total}"
        if card.schedule:
            task += f" · schedule {_line(card.schedule, 80)}"
        lines = [task]
    if card.goal:
        lines.append(f"Goal: {_line(card.goal, limit)}")
    return lines


def _description(card: ApprovalCard, limit: int, items: int, *, whole: bool) -> str:
    lines = [f"**{_line(card.title, limit)}**"]
    lines += _approvable(card, limit, items, whole=whole)
    why = why_line(card)
    if why:
        lines.append(f"*{_line(why, limit)}*")
    lines += _origin(card, limit)
    if card.note:
        lines.append(f"Note: {_line(card.note, limit)}")
    if card.open:
        if card.progress:
            lines.append(f"**{_line(card.progress, limit)}**")
        # Discord shows a timestamp in each reader's own time zone.
        lines.append(f"Expires <t:{int(card.expires_at.timestamp())}:R> · request "
                     f"{_line(card.approval_id, 80)}")
        if card.step_up or not whole:
            lines.append(escape(console_only_text(card)))
    if card.outcome or not card.open:
        icon = _STATUS_ICON.get(card.status, "ℹ️")
        lines.append(f"{icon} **{_with_people(clip(card.outcome or card.status, limit))}**")
    return "\n".join(lines)


def _buttons(card: ApprovalCard) -> list[Json]:
    if card.held:
        return [{"type": BUTTON, "style": DANGER, "label": UNDO_LABEL,
                 "custom_id": encode_custom_id(card.approval_id, UNDO_CODE)}]
    if not card.open:
        return []
    if decides(card):
        return [_button(card, scope) for scope in card.allowed]
    # Decided in the console: step-up (there only), or too long to show whole here —
    # then Deny stays, since denying approves nothing that was not seen.
    buttons = ([] if card.step_up else
               [_button(card, scope) for scope in card.allowed if not scope.approves])
    if card.confirm_url:
        buttons.append({"type": BUTTON, "style": LINK, "label": "Open in console to decide",
                        "url": card.confirm_url})
    return buttons


def _button(card: ApprovalCard, scope: Scope) -> Json:
    return {"type": BUTTON, "style": _STYLES[scope], "label": BUTTON_LABELS[scope],
            "custom_id": encode_custom_id(card.approval_id, _CODES[scope])}


def card_message(card: ApprovalCard) -> Json:
    """The message body of ``card``: buttons while open (Undo while held), the outcome
    once decided. ValueError when the approval id cannot fit a ``custom_id``."""
    icon = _RISK_ICON.get(card.risk, "❓")
    words = "needs approval" if card.open else "approval request"
    embed: Json = {"title": clip(f"{icon} {card.risk} — {words}", MAX_TITLE),
                   "description": _fitted(card)[0],
                   "color": _COLOURS.get(card.status, 0x80848E)}
    if card.console_url and card.console_url.startswith(("https://", "http://")):
        embed["url"] = card.console_url  # the title links to the console
    people = user_ids(card.mentions) if card.open else []
    content = (" ".join(f"<@{u}>" for u in people) + " your answer is needed"
               if people else "")
    buttons = _buttons(card)
    components = [{"type": ACTION_ROW, "components": buttons}] if buttons else []
    return {"content": clip(content, MAX_CONTENT), "embeds": [embed],
            "components": components, "allowed_mentions": allowed_mentions(people)}


def new_card(card: ApprovalCard) -> Json:
    """The body that posts ``card``: `card_message` with its enforced `nonce`."""
    return {**card_message(card), "nonce": nonce(card.approval_id), "enforce_nonce": True}


def notice(text: str, mentions: Sequence[str]) -> Json:
    """A reminder, escalation or notification: the text as written, then the people it is
    meant to reach — Discord users as mentions that ping them, and nobody else."""
    people = " ".join(person(key) for key in mentions)
    body = escape(text) + (f" {people}" if people else "")
    return {"content": clip(body, MAX_CONTENT),
            "allowed_mentions": allowed_mentions(user_ids(mentions))}
