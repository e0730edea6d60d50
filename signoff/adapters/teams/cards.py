"""Approval cards as Adaptive Cards (1.5, Universal Actions): pure functions, no network.

A pending card has one ``Action.Execute`` per allowed decision (Once / Session / Always /
Deny), a held card only Undo, a decided card none. Every button carries the same verb and
``data = {"approval_id", "decision"}``; the details of a request live in the store, never
in the button. ``refresh`` (an ``Action.Execute`` with verb ``signoff.refresh``) lets Teams
fetch the card as it is now for the listed people (their MRIs, ``29:…``, at most 60) when
they look at it. Teams needs card version 1.5 for these actions.

Text from a task (goal, targets, content) is put in TextBlocks, which Teams renders as a
small subset of Markdown; `plain` escapes what would change how it reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from signoff.bot.cards import BUTTON_LABELS, UNDO_LABEL, identical_words, why_line
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import JsonDict, Scope

CARD_TYPE = "application/vnd.microsoft.card.adaptive"
VERSION = "1.5"  # Universal Actions (Action.Execute, refresh) need 1.5 in Teams
DECIDE_VERB = "signoff.decide"
REFRESH_VERB = "signoff.refresh"
UNDO = "undo"
_DECISIONS = {scope.value: scope for scope in BUTTON_LABELS}
MAX_REFRESH_USERS = 60  # Teams refreshes automatically for at most 60 listed users
_FIELD = 400  # characters of one field on the card
_PREVIEW = 2400  # characters of a preview (Teams caps a message near 28 KB)
_MARKDOWN = re.compile(r"([\\`*_\[\]()#>~|-])")
_RISK_COLOR = {"READ": "Good", "DRAFT": "Accent", "SEND": "Warning", "DESTRUCTIVE": "Attention"}


def plain(value: str, limit: int = _FIELD) -> str:
    """``value`` shortened to ``limit`` and with Markdown characters escaped."""
    value = " ".join(value.split())
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return _MARKDOWN.sub(r"\\\1", value)


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
    body: list[JsonDict] = [_text(f"{'Approval needed' if card.open else 'Decided'} · "
                                  f"{card.risk.upper()} · {plain(card.tool, 60)}",
                                  color=_RISK_COLOR.get(card.risk.upper(), "Default"),
                                  size="Small"),
                            _text(plain(card.title), weight="Bolder", size="Medium")]
    body.extend(_facts(card))
    if card.preview is not None and card.open:
        text = card.preview.text[:_PREVIEW]
        body.append(_text(plain(card.preview.label, 200), weight="Bolder"))
        body.append(_text(text, fontType="Monospace", isSubtle=False))
    body.extend(_text(line) for line in _status_lines(card))
    if card.outcome:
        body.append(_text(plain(card.outcome), weight="Bolder",
                          color="Good" if card.status == "approved" else "Attention"))
    if feedback:
        body.append(_text(plain(feedback), color="Warning", weight="Bolder"))
    result: JsonDict = {
        "type": "AdaptiveCard", "version": VERSION,
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "body": body, "actions": _actions(card),
    }
    if refresh_users and (card.open or card.held):
        result["refresh"] = {
            "action": {"type": "Action.Execute", "title": "Refresh", "verb": REFRESH_VERB,
                       "data": {"approval_id": card.approval_id}},
            "userIds": list(refresh_users)[:MAX_REFRESH_USERS]}
    return result


def rendered_text(content: JsonDict) -> str:
    """Every TextBlock's and fact's text of an Adaptive Card, in order (tests, logs)."""
    parts: list[str] = []
    for item in content.get("body", []):
        if item.get("type") == "TextBlock":
            parts.append(str(item.get("text", "")))
        for fact in item.get("facts", []):
            parts.append(f"{fact.get('title')} {fact.get('value')}")
    return "\n".join(parts).replace("\\", "")


def _text(text: str, **style: Any) -> JsonDict:
    return {"type": "TextBlock", "text": text, "wrap": True, **style}


def _facts(card: ApprovalCard) -> list[JsonDict]:
    facts = [("Targets", ", ".join(plain(t, 200) for t in card.targets[:20]))] \
        if card.targets else []
    facts.extend((plain(label, 40), plain(value)) for label, value in card.details[:20])
    if card.goal:
        facts.append(("Goal", plain(card.goal)))
    facts.append(("From", plain(card.origin)))
    if card.open:
        facts.append(("Expires", card.expires_at.strftime("%Y-%m-%d %H:%M UTC")))
    facts.append(("Request", plain(card.approval_id, 80)))
    blocks: list[JsonDict] = [{"type": "FactSet", "facts": [
        {"title": title, "value": value} for title, value in facts]}]
    why = why_line(card)
    if why:  # whose words these are is part of the line ("Why (agent): …")
        blocks.append(_text(plain(why), isSubtle=True))
    return blocks


def _status_lines(card: ApprovalCard) -> list[str]:
    lines = [plain(f"Note: {card.note}")] if card.note else []
    same = identical_words(card.identical)
    if same and card.open:
        lines.append(plain(f"Decides {same}"))
    if card.open and card.progress:
        lines.append(plain(card.progress))
    if card.held and card.hold_until is not None:
        lines.append(f"Runs at {card.hold_until.strftime('%H:%M UTC')} unless undone")
    if card.open and card.step_up:
        lines.append("Decided in the console only (step-up): open it to approve or deny.")
    return lines


def _actions(card: ApprovalCard) -> list[JsonDict]:
    if card.held:
        return [_execute(UNDO_LABEL, card.approval_id, UNDO)]
    if card.open and card.step_up:
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
