"""What a push message carries, as pure functions: JSON the console's service worker
(``/static/sw.js``) turns into a notification.

``{"kind": "card" | "decided", "tag", "title", "body", "url", "decide", "actions":
[{"action", "title", "token"?}]}`` — ``url`` opens the request's console page; an action
with a ``token`` posts it to ``decide``. The title and body are the card as
`bot.cards.notification` writes it: every target, content line and the preview.

A push service need take no more than one 4,096-byte aes128gcm record, which leaves
`PLAINTEXT` bytes for the JSON (RFC 8291 §4); a longer message is refused (413) and the
approver never sees it. So the JSON is UTF-8 (a Cyrillic letter is 2 bytes, not the 6
of a ``\\uXXXX`` escape) and the body is cut to `BODY` characters and then until the
message, measured as it is sent, fits (`fits`). A notification that had to cut anything
carries Deny and Open, never Once (`bot.cards.notification_scopes`): a notification
never approves what it does not show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from signoff.bot.cards import (
    BUTTON_LABELS,
    Fits,
    Notification,
    notification,
    notification_decides,
    notification_scopes,
)
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import JsonDict, RiskClass, Scope

DECIDE_PATH = "/webpush/decide"
BODY = 1200  # characters of card text a notification shows at most (a phone shows less)
RECORD = 4096  # bytes of payload every push service takes; more may be a 413 (RFC 8030 §7.2)
# What of it the JSON may take (RFC 8291 §4): less the aes128gcm header (salt 16, record
# size 4, key id length 1, the sender's P-256 key 65), the AEAD tag (16) and the padding
# delimiter (1), in the one record pywebpush writes.
PLAINTEXT = RECORD - 86 - 16 - 1  # 3993
# Bytes kept for all of a message but its title and body (its tag, URLs, the actions and
# their tokens), whatever it takes: whether a card fits whole, which decides whether Once
# is offered, is the same for every browser and known before any token is signed. About
# 560 with two tokens for web:bob; 1,200 holds a holder's name of 150 ASCII letters (or
# 40 Cyrillic ones, which a token carries as escapes). `card_message` measures the rest.
ENVELOPE = 1200


def tag(approval_id: str) -> str:
    """One notification per request: a later message with the same tag replaces it."""
    return f"signoff-{approval_id}"


def encoded(message: JsonDict) -> bytes:
    """``message`` as the bytes that are encrypted and sent."""
    # A lone surrogate (valid in a JSON string, not in UTF-8) becomes the \uXXXX escape
    # ensure_ascii wrote for it, rather than an error.
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "backslashreplace")


def fits(card: ApprovalCard, *, tokens: Mapping[Scope, str], base: str, open_url: str
         ) -> Fits:
    """Whether a card message with a given title and body is at most `PLAINTEXT` bytes,
    measured on the message itself, its envelope counted as at least `ENVELOPE`."""
    def size(title: str, body: str) -> int:
        return len(encoded(_card(card, title, body, tokens=tokens, base=base,
                                 open_url=open_url)))
    unused = max(0, ENVELOPE - size("", ""))
    return lambda title, body: size(title, body) + unused <= PLAINTEXT


# Where no message is being made (which decisions to sign, which to take): the envelope
# is then reckoned as `ENVELOPE`, as it is for any message whose envelope is smaller.
def _unsent(card: ApprovalCard) -> Fits:
    return fits(card, tokens={}, base="", open_url="")


def offers_decisions(card: ApprovalCard, actions_for: frozenset[RiskClass]) -> bool:
    """True when the notification of ``card`` carries Once: its risk class is allowed
    from a notification, it is not step-up, and it shows the whole action uncut."""
    return notification_decides(card, BODY, actions_for, _unsent(card))


def scopes(card: ApprovalCard, note: str | None, actions_for: frozenset[RiskClass]
           ) -> tuple[Scope, ...]:
    """The decisions the notification of ``card`` (with ``note``) carries a token for."""
    return notification_scopes(card, note, BODY, actions_for, _unsent(card))


def shown(card: ApprovalCard, note: str | None, *, tokens: Mapping[Scope, str], base: str,
          open_url: str) -> Notification:
    """The title and body of the message of ``card`` with these tokens and URLs."""
    return notification(card, note, BODY, fits(card, tokens=tokens, base=base,
                                               open_url=open_url))


def card_message(card: ApprovalCard, *, tokens: Mapping[Scope, str], base: str,
                 open_url: str, note: str | None = None) -> bytes:
    """The push for a request: Once and Deny with their tokens; without a Once token
    (Deny alone, or none), Open after them."""
    text = shown(card, note, tokens=tokens, base=base, open_url=open_url)
    if not text.whole and any(scope.approves for scope in tokens):
        # Tokens and URLs longer than `ENVELOPE` (a long name, a long public_url) cut
        # text `scopes` found whole: this message does not show it all, so it approves
        # nothing.
        tokens = {scope: token for scope, token in tokens.items() if not scope.approves}
        text = shown(card, note, tokens=tokens, base=base, open_url=open_url)
    return encoded(_card(card, text.title, text.text, tokens=tokens, base=base,
                         open_url=open_url))


def _card(card: ApprovalCard, title: str, body: str, *, tokens: Mapping[Scope, str],
          base: str, open_url: str) -> JsonDict:
    actions: list[JsonDict] = [
        {"action": scope.value, "title": BUTTON_LABELS[scope], "token": tokens[scope]}
        for scope in (Scope.ONCE, Scope.DENY) if scope in tokens]
    if Scope.ONCE not in tokens:
        actions.append({"action": "open", "title": "Open"})
    return {"kind": "card", "tag": tag(card.approval_id), "title": title, "body": body,
            "url": open_url, "decide": base + DECIDE_PATH, "actions": actions}


def decided_message(card: ApprovalCard, *, open_url: str) -> bytes:
    """The push replacing a request's notification once it is answered (no actions)."""
    return encoded({"kind": "decided", "tag": tag(card.approval_id),
                    "title": card.title[:200], "body": card.outcome or card.status,
                    "url": open_url, "actions": []})
