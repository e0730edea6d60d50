"""What a push message carries, as pure functions: JSON the console's service worker
(``/static/sw.js``) turns into a notification.

``{"kind": "card" | "decided", "tag", "title", "body", "url", "decide", "actions":
[{"action", "title", "token"?}]}`` — ``url`` opens the request's console page; an action
with a ``token`` posts it to ``decide``. The title and body are the card as
`bot.cards.notification` writes it: every target, content line and the preview. Push
services take at most 4,096 bytes, so the body is cut to `BODY` characters, and a
notification that had to cut anything carries Deny and Open, never Once
(`bot.cards.notification_scopes`): a notification never approves what it does not show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from signoff.bot.cards import (
    BUTTON_LABELS,
    notification,
    notification_decides,
    notification_scopes,
)
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import RiskClass, Scope

DECIDE_PATH = "/webpush/decide"
BODY = 1200  # characters of card text in a notification (the whole payload stays < 4 KB)


def tag(approval_id: str) -> str:
    """One notification per request: a later message with the same tag replaces it."""
    return f"signoff-{approval_id}"


def offers_decisions(card: ApprovalCard, actions_for: frozenset[RiskClass]) -> bool:
    """True when the notification of ``card`` carries Once: its risk class is allowed
    from a notification, it is not step-up, and it shows the whole action uncut."""
    return notification_decides(card, BODY, actions_for)


def scopes(card: ApprovalCard, note: str | None, actions_for: frozenset[RiskClass]
           ) -> tuple[Scope, ...]:
    """The decisions the notification of ``card`` (with ``note``) carries a token for."""
    return notification_scopes(card, note, BODY, actions_for)


def card_message(card: ApprovalCard, *, tokens: Mapping[Scope, str], base: str,
                 open_url: str, note: str | None = None) -> bytes:
    """The push for a request: Once and Deny with their tokens; without a Once token
    (Deny alone, or none), Open after them."""
    shown = notification(card, note, BODY)
    actions: list[dict[str, str]] = [
        {"action": scope.value, "title": BUTTON_LABELS[scope], "token": tokens[scope]}
        for scope in (Scope.ONCE, Scope.DENY) if scope in tokens]
    if Scope.ONCE not in tokens:
        actions.append({"action": "open", "title": "Open"})
    return json.dumps({"kind": "card", "tag": tag(card.approval_id),
                       "title": shown.title, "body": shown.text,
                       "url": open_url, "decide": base + DECIDE_PATH, "actions": actions},
                      separators=(",", ":")).encode()


def decided_message(card: ApprovalCard, *, open_url: str) -> bytes:
    """The push replacing a request's notification once it is answered (no actions)."""
    return json.dumps({"kind": "decided", "tag": tag(card.approval_id),
                       "title": card.title[:200], "body": card.outcome or card.status,
                       "url": open_url, "actions": []}, separators=(",", ":")).encode()
