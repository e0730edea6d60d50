"""The signed links of an e-mail card: one per (approval, decision, address).

A link carries ``<payload>.<mac>``, both base64url: the payload names the approval, the
decision, the address it was sent to and when it expires (the request's own expiry);
the MAC is HMAC-SHA256 over the payload with the card's key. That key is never stored: it
is derived (`card_key`) from the daemon's server secret (`signoff.runtime.state`, a file
of the state dir, 0600) and the request's id and card id. The card id — random, drawn
when the mail is sent — is all the database keeps (the e-mail card's message id): read
from the database, it forges nothing. Nodes sharing a database check each other's links
when they share the server secret file. One key per card, so a link of one request
proves nothing about another.

Cards mailed by 0.2 kept their key itself as the message id; such a card id has no
``CARD_PREFIX`` and its links are refused as invalid (the request can still be decided
on any other surface): a key that was readable in the database must not decide anything.

Changing any part of a token (another decision, another address, a later expiry) breaks
its MAC. Single use comes from the decision itself: the POST decides by compare-and-set,
so a second use finds the request decided.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from signoff.runtime.models import Scope
from signoff.runtime.state import derive_key

_CONTEXT = b"signoff-email-link-v1:"
CARD_PREFIX = "c2."  # a card id of ours (0.2 stored the key itself, without it)


class BadToken(ValueError):
    """The link is not one of ours, or was changed on the way."""


@dataclass(frozen=True)
class LinkClaim:
    """What a link says: who may answer which request how, until when."""

    approval_id: str
    scope: Scope
    address: str
    expires_at: datetime


def new_card_id() -> str:
    """A fresh card id (kept as the card's message id); not a key by itself."""
    return CARD_PREFIX + secrets.token_urlsafe(16)


def card_key(secret: bytes, approval_id: str, card_id: str) -> bytes:
    """The key of one card's links; BadToken for a card id that is not ours (0.2's)."""
    if not card_id.startswith(CARD_PREFIX):
        raise BadToken("the card was mailed before its key was derived; its links expired")
    return derive_key(secret, "email-link", approval_id, card_id)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise BadToken("not base64") from exc


def _mac(key: bytes, payload: str) -> str:
    digest = hmac.new(key, _CONTEXT + payload.encode("ascii"), hashlib.sha256)
    return _b64(digest.digest())


def sign(claim: LinkClaim, key: bytes) -> str:
    """The token for ``claim``, signed with the card's ``key``."""
    body = {"a": claim.approval_id, "d": claim.scope.value, "m": claim.address,
            "x": int(claim.expires_at.timestamp())}
    payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{payload}.{_mac(key, payload)}"


def read(token: str) -> LinkClaim:
    """What ``token`` claims, NOT yet verified (to find the card whose key checks it)."""
    payload, dot, _ = token.partition(".")
    if not dot or not payload:
        raise BadToken("not a link token")
    try:
        body = json.loads(_unb64(payload))
        return LinkClaim(approval_id=str(body["a"]), scope=Scope(body["d"]),
                         address=str(body["m"]),
                         expires_at=datetime.fromtimestamp(int(body["x"]), UTC))
    except (ValueError, KeyError, TypeError) as exc:
        raise BadToken("unreadable link token") from exc


def verify(token: str, key: bytes) -> LinkClaim:
    """The claim of ``token`` if its MAC is right for ``key``; BadToken otherwise."""
    claim = read(token)
    payload, _, mac = token.partition(".")
    if not hmac.compare_digest(mac.encode("ascii", "replace"),
                               _mac(key, payload).encode("ascii")):
        raise BadToken("the link's signature does not match")
    return claim
