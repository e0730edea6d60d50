"""The signed links of an e-mail card: one per (approval, decision, address).

A link carries ``<payload>.<mac>``, both base64url: the payload names the approval, the
decision, the address it was sent to and when it expires (the request's own expiry);
the MAC is HMAC-SHA256 over the payload with the card's key. That key is 32 random bytes
drawn when the mail is sent and kept in the database as the e-mail card's message id —
never in the code, never in the config, one per request — so any node sharing the
database can check a link, and a link of one request proves nothing about another.

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

_CONTEXT = b"signoff-email-link-v1:"


class BadToken(ValueError):
    """The link is not one of ours, or was changed on the way."""


@dataclass(frozen=True)
class LinkClaim:
    """What a link says: who may answer which request how, until when."""

    approval_id: str
    scope: Scope
    address: str
    expires_at: datetime


def new_key() -> str:
    """A fresh card key (kept as the card's message id)."""
    return secrets.token_urlsafe(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise BadToken("not base64") from exc


def _mac(key: str, payload: str) -> str:
    digest = hmac.new(key.encode("ascii"), _CONTEXT + payload.encode("ascii"), hashlib.sha256)
    return _b64(digest.digest())


def sign(claim: LinkClaim, key: str) -> str:
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


def verify(token: str, key: str) -> LinkClaim:
    """The claim of ``token`` if its MAC is right for ``key``; BadToken otherwise."""
    claim = read(token)
    payload, _, mac = token.partition(".")
    if not hmac.compare_digest(mac.encode("ascii", "replace"),
                               _mac(key, payload).encode("ascii")):
        raise BadToken("the link's signature does not match")
    return claim
