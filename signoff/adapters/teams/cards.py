"""Approval cards as Adaptive Cards (1.5, Universal Actions): pure functions, no network.

A pending card has one ``Action.Execute`` per allowed decision (Once / Session / Always /
Deny), a held card only Undo, a decided card none. Every button carries the same verb and
``data = {"approval_id", "decision"}``; the details of a request live in the store, never
in the button. ``refresh`` (an ``Action.Execute`` with verb ``signoff.refresh``) lets Teams
fetch the card as it is now for the listed people (their MRIs, ``29:…``, at most 60) when
they look at it. Teams needs card version 1.5 for these actions.

What a decision approves (targets, content, the preview) is shown whole or not decided
here (`bot.cards.decides_here` within `CARD_LIMIT`): a card too long for that shows it cut,
without decision buttons, with a link to the console. Text from a task is put in
``TextRun``s, which Teams shows as written (a ``TextBlock`` would read it as Markdown).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from signoff.bot.cards import (
    BUTTON_LABELS,
    UNDO_LABEL,
    console_only_text,
    decides_here,
    identical_words,
    why_line,
)
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import JsonDict, Scope

CARD_TYPE = "application/vnd.microsoft.card.adaptive"
VERSION = "1.5"  # Universal Actions (Action.Execute, refresh) need 1.5 in Teams
DECIDE_VERB = "signoff.decide"
REFRESH_VERB = "signoff.refresh"
UNDO = "undo"
_DECISIONS = {scope.value: scope for scope in BUTTON_LABELS}
MAX_REFRESH_USERS = 60  # Teams refreshes automatically for at most 60 listed users
# Characters of what a decision approves that a card shows whole. A Teams message holds
# about 28 KB and the connector's JSON may write a character as \uXXXX (6 bytes).
CARD_LIMIT = 3000
_FIELD = 400  # characters of one other field (or of an approvable one on a cut card)
_ITEMS = 20  # targets and content lines shown on a cut card
_PREVIEW = 1200  # characters of a preview on a cut card
_RISK_COLOR = {"READ": "Good", "DRAFT": "Accent", "SEND": "Warning", "DESTRUCTIVE": "Attention"}


def decides(card: ApprovalCard) -> bool:
    """True when the Teams card offers decisions: not under step-up, and what the
    decision approves fits whole (`cards.decides_here` within CARD_LIMIT)."""
    return decides_here(card, CARD_LIMIT)


def decision_of(data: object) -> tuple[str, Scope, bool] | None:
    """(approval id, scope, undo) from an ``Action.Execute``'s data, None if not ours."""
    if not isinstance(data, dict):
        return None
    approval_id, decision = data.get("approval_id"), data.get("decision")
    if not isinstance(approval_id, str) or not approval_id or len(approval_id) > 200:
        return None
    if decision == UNDO:
        return approval_id, Scope.DENY, True
    scope = _DECISIONS.get(decision) if isinstance(decision, str) else None
    return (approval_id, scope, False) if scope is not None else None


def adaptive_card(card: ApprovalCard, *, refresh_users: Sequence[str] = (),
                  feedback: str | None = None) -> JsonDict:
    """The Adaptive Card of ``card``; ``feedback`` is a line for whoever just clicked."""
    whole = card.open and decides(card)
    body: list[JsonDict] = [
        _line(f"{'Approval needed' if card.open else 'Decided'} · {card.risk.upper()} · "
              f"{cut(card.tool, 60)}", color=_RISK_COLOR.get(card.risk.upper(), "Default")),
        _line(cut(card.title), weight="Bolder", size="Medium"),
        *_approvable(card, whole=whole), *_context(card)]
    body.extend(_line(text) for text in _status_lines(card, whole=whole))
    if card.outcome:
        body.append(_line(cut(card.outcome), weight="Bolder",
                          color="Good" if card.status == "approved" else "Attention"))
    if feedback:
        body.append(_line(cut(feedback), weight="Bolder", color="Warning"))
    result: JsonDict = {
        "type": "AdaptiveCard", "version": VERSION,
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "body": body, "actions": _actions(card, whole=whole),
    }
    if refresh_users and (card.open or card.held):
        result["refresh"] = {
            "action": {"type": "Action.Execute", "title": "Refresh", "verb": REFRESH_VERB,
                       "data": {"approval_id": card.approval_id}},
            "userIds": list(refresh_users)[:MAX_REFRESH_USERS]}
    return result


def rendered_text(content: JsonDict) -> str:
    """Every text of an Adaptive Card's body, one block a line (tests, logs)."""
    lines = []
    for item in content.get("body", []):
        if item.get("type") == "TextBlock":
            lines.append(str(item.get("text", "")))
        elif item.get("type") == "RichTextBlock":
            lines.append("".join(str(r.get("text", "")) for r in item.get("inlines", [])))
    return "\n".join(lines)


def cut(value: str, limit: int = _FIELD) -> str:
    """``value`` on one line, at most ``limit`` characters."""
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _line(text: str, *, label: str | None = None, **style: Any) -> JsonDict:
    """One block of text shown as written: an optional bold label, then the text."""
    runs: list[JsonDict] = [{"type": "TextRun", "text": f"{label}: ", "weight": "Bolder"}] \
        if label else []
    runs.append({"type": "TextRun", "text": text, **style})
    return {"type": "RichTextBlock", "inlines": runs}


def _approvable(card: ApprovalCard, *, whole: bool) -> list[JsonDict]:
    """Targets, content lines and the preview: whole when the card decides here."""
    blocks: list[JsonDict] = []
    items = None if whole else _ITEMS
    shown = card.targets[:items]
    if shown:
        more = len(card.targets) - len(shown)
        text = ", ".join(t if whole else cut(t) for t in shown)
        blocks.append(_line(text + (f" and {more} more" if more else ""), label="Targets"))
    for label, value in card.details[:items]:
        blocks.append(_line(value if whole else cut(value), label=cut(label, 40)))
    if card.preview is not None and card.open:
        text = card.preview.text
        if not whole and len(text) > _PREVIEW:
            text = text[:_PREVIEW].rsplit("\n", 1)[0] + "\n… (cut to fit Teams)"
        blocks.append(_line(cut(card.preview.label, 200), weight="Bolder"))
        blocks.append(_line(text, fontType="Monospace"))
    return blocks


def _context(card: ApprovalCard) -> list[JsonDict]:
    blocks = [_line(cut(why), isSubtle=True) for why in [why_line(card)] if why]
    if card.goal:
        blocks.append(_line(cut(card.goal), label="Goal"))
    blocks.append(_line(cut(card.origin), isSubtle=True))
    if card.open:
        blocks.append(_line(f"{card.expires_at.strftime('%Y-%m-%d %H:%M UTC')} · request "
                            f"{cut(card.approval_id, 80)}", label="Expires", isSubtle=True))
    return blocks


def _status_lines(card: ApprovalCard, *, whole: bool) -> list[str]:
    lines = [cut(f"Note: {card.note}")] if card.note else []
    same = identical_words(card.identical)
    if same and card.open:
        lines.append(f"Decides {same}")
    if card.open and card.progress:
        lines.append(cut(card.progress))
    if card.held and card.hold_until is not None:
        lines.append(f"Runs at {card.hold_until.strftime('%H:%M UTC')} unless undone")
    if card.open and not whole:
        lines.append(console_only_text(card))
    return lines


def _actions(card: ApprovalCard, *, whole: bool) -> list[JsonDict]:
    if card.held:
        return [_execute(UNDO_LABEL, card.approval_id, UNDO)]
    if card.open and not whole:  # step-up, or too long to show whole: the console decides
        url = card.confirm_url or card.console_url
        return [{"type": "Action.OpenUrl", "title": "Open in console to decide",
                 "url": url}] if url else []
    actions = ([_execute(BUTTON_LABELS[s], card.approval_id, s.value) for s in card.allowed]
               if card.open else [])
    if card.console_url:
        actions.append({"type": "Action.OpenUrl", "title": "Open in console",
                        "url": card.console_url})
    return actions


def _execute(title: str, approval_id: str, decision: str) -> JsonDict:
    style = {"style": "destructive"} if decision == Scope.DENY.value else {}
    return {"type": "Action.Execute", "title": title, "verb": DECIDE_VERB,
            "data": {"approval_id": approval_id, "decision": decision}, **style}


def attachment(content: JsonDict) -> JsonDict:
    """An activity attachment holding an Adaptive Card."""
    return {"contentType": CARD_TYPE, "content": content}
