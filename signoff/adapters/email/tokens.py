"""The signed links of an e-mail card: one per (approval, decision, address).

The token scheme is every surface's (`signoff.bot.links`); this module keeps the e-mail
links' purpose (``email-link``, which separates their keys from a push action's) and the
names the surface and its tests have used since 0.2.

Cards mailed by 0.2 kept their key itself as the message id; such a card id has no
``CARD_PREFIX`` and its links are refused as invalid (the request can still be decided
on any other surface): a key that was readable in the database must not decide anything.
"""

from __future__ import annotations

from signoff.bot.links import CARD_PREFIX, BadToken, LinkClaim, LinkKind, new_card_id, read

__all__ = ["CARD_PREFIX", "EMAIL", "BadToken", "LinkClaim", "card_key", "new_card_id",
           "read", "sign", "verify"]

EMAIL = LinkKind("email-link")


def card_key(secret: bytes, approval_id: str, card_id: str) -> bytes:
    """The key of one card's links; BadToken for a card id that is not ours (0.2's)."""
    return EMAIL.key(secret, approval_id, card_id)


def sign(claim: LinkClaim, key: bytes) -> str:
    """The token for ``claim``, signed with the card's ``key``."""
    return EMAIL.sign(claim, key)


def verify(token: str, key: bytes) -> LinkClaim:
    """The claim of ``token`` if its MAC is right for ``key``; BadToken otherwise."""
    return EMAIL.verify(token, key)
