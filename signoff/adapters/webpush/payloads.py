"""What a push message carries, as pure functions: JSON the console's service worker
(``/static/sw.js``) turns into a notification.

``{"kind": "card" | "decided", "tag", "title", "body", "url", "decide", "actions":
[{"action", "title", "token"?}]}`` — ``url`` opens the request's console page; an action
with a ``token`` posts it to ``decide``. Push services take at most 4,096 bytes, so the
body is cut to `BODY` characters, and a card whose approvable texts are longer than that
offers Open only (`bot.cards.decides_here`): a notification never approves what it does
not show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from signoff.bot.cards import BUTTON_LABELS, decides_here, notification_text
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import RiskClass, Scope

DECIDE_PATH = "/webpush/decide"
BODY = 1200  # characters of card text in a notification (the whole payload stays < 4 KB)
SCOPES = (Scope.ONCE, Scope.DENY)  # browsers show two actions at most


def tag(approval_id: str) -> str:
    """One notification per request: a later message with the same tag replaces it."""
    return f"signoff-{approval_id}"


def offers_decisions(card: ApprovalCard, actions_for: frozenset[RiskClass]) -> bool:
    """True when the notification of ``card`` carries Once and Deny: its risk class is
    allowed from a notification, and it is neither step-up nor too long to show whole."""
    return card.risk in actions_for and decides_here(card, BODY)


def card_message(card: ApprovalCard, *, tokens: Mapping[Scope, str], base: str,
                 open_url: str, note: str | None = None) -> bytes:
    """The push for a request: Once/Deny with their tokens, or Open when ``tokens`` is empty."""
    actions: list[dict[str, str]] = [
        {"action": scope.value, "title": BUTTON_LABELS[scope], "token": tokens[scope]}
        for scope in SCOPES if scope in tokens]
    if not actions:
        actions = [{"action": "open", "title": "Open"}]
    return json.dumps({"kind": "card", "tag": tag(card.approval_id),
                       "title": f"{card.risk}: {card.title}"[:200],
                       "body": notification_text(card, note, BODY),
                       "url": open_url, "decide": base + DECIDE_PATH, "actions": actions},
                      separators=(",", ":")).encode()


def decided_message(card: ApprovalCard, *, open_url: str) -> bytes:
    """The push replacing a request's notification once it is answered (no actions)."""
    return json.dumps({"kind": "decided", "tag": tag(card.approval_id),
                       "title": card.title[:200], "body": card.outcome or card.status,
                       "url": open_url, "actions": []}, separators=(",", ":")).encode()
