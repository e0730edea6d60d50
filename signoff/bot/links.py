"""Signed decision links: one token per (approval, decision, person), for any surface.

E-mail links, push notification actions and ntfy buttons all decide through a token
``<payload>.<mac>``, both base64url: the payload names the approval, the decision, the
person it was made for and when it expires (the request's own expiry); the MAC is
HMAC-SHA256 over the payload with the card's key. That key is never stored: it is derived
(`LinkKind.key`) from the daemon's server secret (`signoff.runtime.state`, a file of the
state dir, 0600), the surface's purpose, and the request's id and card id. The card id —
random, drawn when the card is sent — is all the database keeps (the card's message id):
read from the database, it forges nothing. Nodes sharing a database check each other's
links when they share the server secret file. One key per card and surface, so a link of
one request (or of one surface) proves nothing about another.

Changing any part of a token (another decision, another person, a later expiry) breaks
its MAC. Single use comes from the decision itself: the request is decided by
compare-and-set, so a second use finds it decided and is refused with a message
(`check`), as is a link of a request that expired.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardLookup,
    DecisionEvent,
    DecisionHandler,
    decide_guarded,
)
from signoff.runtime.clock import Clock
from signoff.runtime.models import JsonDict, Scope
from signoff.runtime.state import derive_key
from signoff.runtime.words import ALREADY_DECIDED

CARD_PREFIX = "c2."  # a card id of ours (0.2's e-mail cards stored the key itself)


class BadToken(ValueError):
    """The link is not one of ours, or was changed on the way."""


@dataclass(frozen=True)
class LinkClaim:
    """What a link says: who may answer which request how, until when."""

    approval_id: str
    scope: Scope
    address: str  # the person, in the surface's own form (an address, a key's name)
    expires_at: datetime


def new_card_id() -> str:
    """A fresh card id (kept as the card's message id); not a key by itself."""
    return CARD_PREFIX + secrets.token_urlsafe(16)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise BadToken("not base64") from exc


def read(token: str) -> LinkClaim:
    """What ``token`` claims, NOT yet verified (to find the card whose key checks it)."""
    payload, dot, _ = token.partition(".")
    if not dot or not payload or len(token) > 2048:
        raise BadToken("not a link token")
    try:
        body = json.loads(_unb64(payload))
        return LinkClaim(approval_id=str(body["a"]), scope=Scope(body["d"]),
                         address=str(body["m"]),
                         expires_at=datetime.fromtimestamp(int(body["x"]), UTC))
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise BadToken("unreadable link token") from exc


@dataclass(frozen=True)
class LinkKind:
    """The links of one surface: ``purpose`` ("email-link") separates their keys."""

    purpose: str

    def key(self, secret: bytes, approval_id: str, card_id: str) -> bytes:
        """The key of one card's links; BadToken for a card id that is not ours."""
        if not card_id.startswith(CARD_PREFIX):
            raise BadToken("the card was sent before its key was derived; its links expired")
        return derive_key(secret, self.purpose, approval_id, card_id)

    def _mac(self, key: bytes, payload: str) -> str:
        context = f"signoff-{self.purpose}-v1:".encode()
        return _b64(hmac.new(key, context + payload.encode("ascii"), hashlib.sha256).digest())

    def sign(self, claim: LinkClaim, key: bytes) -> str:
        """The token for ``claim``, signed with the card's ``key``."""
        body = {"a": claim.approval_id, "d": claim.scope.value, "m": claim.address,
                "x": int(claim.expires_at.timestamp())}
        payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
        return f"{payload}.{self._mac(key, payload)}"

    def verify(self, token: str, key: bytes) -> LinkClaim:
        """The claim of ``token`` if its MAC is right for ``key``; BadToken otherwise."""
        claim = read(token)
        payload, _, mac = token.partition(".")
        if not hmac.compare_digest(mac.encode("ascii", "replace"),
                                   self._mac(key, payload).encode("ascii")):
            raise BadToken("the link's signature does not match")
        return claim


class LinkRefused(Exception):
    """Why a link decides nothing: an HTTP status, a title and a sentence for people."""

    def __init__(self, status: int, title: str, text: str) -> None:
        super().__init__(text)
        self.status, self.title, self.text = status, title, text


@dataclass(frozen=True)
class CheckedLink:
    """A link whose signature checked out, and its request's card as it is now."""

    claim: LinkClaim
    card: ApprovalCard


def invalid() -> LinkRefused:
    """The one answer to a token that is not ours, changed, or of a request that is gone."""
    return LinkRefused(400, "Link not valid", "This link is not a valid approval link (it "
                       "may have been cut or changed, or its request no longer exists).")


@dataclass(frozen=True)
class LinkChecker:
    """Checks the links of one surface against the store's cards (any node's)."""

    kind: LinkKind
    surface: str  # whose card id (message id) keys the links
    secret: bytes
    lookup: CardLookup
    clock: Clock

    def sign(self, card: ApprovalCard, card_id: str, scope: Scope, address: str) -> str:
        """The token deciding ``card`` with ``scope`` as ``address``."""
        key = self.kind.key(self.secret, card.approval_id, card_id)
        return self.kind.sign(LinkClaim(approval_id=card.approval_id, scope=scope,
                                        address=address, expires_at=card.expires_at), key)

    async def check(self, token: str) -> CheckedLink:
        """The token's claim and the request's card, or `LinkRefused` saying why not.

        Nothing about the request is told before the signature checks out, not even
        whether it exists (a request that is gone reads as an invalid link too); a link
        already used, or of a request answered elsewhere, is refused as stale.
        """
        try:
            claimed = read(token)
        except BadToken:
            raise invalid() from None
        posted = await self.lookup(claimed.approval_id)
        if posted is None:
            raise invalid()
        card_id = next((r.message_id for r in posted.refs if r.surface == self.surface), None)
        if card_id is None:  # the card is out, its id not stored yet (a moment, or a crash)
            raise LinkRefused(503, "Not ready", "This link cannot be checked yet; try again "
                              "in a moment.")
        try:
            claim = self.kind.verify(token, self.kind.key(self.secret, claimed.approval_id,
                                                          card_id))
        except BadToken:
            raise invalid() from None
        card = posted.card
        if card.status == "expired" or (card.open and self.clock.now() >= claim.expires_at):
            raise LinkRefused(410, "Expired", "This request has expired; its links no "
                              "longer decide anything.")
        if not card.open:
            raise LinkRefused(409, ALREADY_DECIDED, "This link was already used or the "
                              f"request was already answered: {card.outcome or card.status}.")
        return CheckedLink(claim=claim, card=card)


async def decide_by_link(links: LinkChecker, handler: DecisionHandler | None, token: str,
                         *, holder_may: Callable[[str], Awaitable[str | None]] | None = None,
                         ) -> tuple[int, JsonDict]:
    """What pressing a signed link's button answers (ntfy's buttons, Web Push's actions):
    the HTTP status and ``{"accepted", "message"}``. The token decides exactly what it
    says, as whom it names; a refused link, a holder ``holder_may`` says may no longer
    decide (403), a daemon not taking decisions yet (503) and a decision the flow refuses
    (409) each say why."""
    try:
        checked = await links.check(token)
    except LinkRefused as refused:
        return refused.status, {"accepted": False, "message": refused.text}
    if holder_may is not None:
        why = await holder_may(checked.claim.address)
        if why:
            return 403, {"accepted": False, "message": why}
    if handler is None:
        return 503, {"accepted": False,
                     "message": "The daemon is starting or stopping; try again."}
    claim = checked.claim
    outcome = await decide_guarded(handler, DecisionEvent(
        approval_id=claim.approval_id, scope=claim.scope, actor=Actor.parse(claim.address),
        surface=links.surface), links.surface)
    return (200 if outcome.accepted else 409), {"accepted": outcome.accepted,
                                                "message": outcome.message}
