"""Discord's request signature on interactions: Ed25519 over timestamp + body.

Discord signs every request to the interactions endpoint with the application's key:
``X-Signature-Ed25519`` is the hex signature of ``X-Signature-Timestamp`` followed by the
raw body, verifiable with the application's public key (`cryptography`'s Ed25519). A
request is refused when either header is missing or unreadable, when the signature does
not verify, or when its timestamp is more than five minutes from our clock: a captured
request stays usable no longer than that (and the replay ledger remembers the ones
accepted meanwhile).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

SIGNATURE_HEADER = "x-signature-ed25519"
TIMESTAMP_HEADER = "x-signature-timestamp"
WINDOW_SECONDS = 300


class Refusal(enum.StrEnum):
    """Why a request was refused; the value is the log event's reason."""

    NO_SIGNATURE = "no_signature"
    STALE = "stale_timestamp"
    BAD_SIGNATURE = "bad_signature"


class SignatureCheck:
    """Verifies requests against one application's public key (64 hex characters)."""

    def __init__(self, public_key: str) -> None:
        self._key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key))

    def refusal(self, body: bytes, headers: Mapping[str, str], now: datetime) -> Refusal | None:
        """None when Discord signed ``body`` recently; otherwise why not."""
        signature, timestamp = headers.get(SIGNATURE_HEADER), headers.get(TIMESTAMP_HEADER)
        if not signature or not timestamp:
            return Refusal.NO_SIGNATURE
        try:
            raw = bytes.fromhex(signature)
            at = int(timestamp)
        except ValueError:
            return Refusal.BAD_SIGNATURE
        try:
            self._key.verify(raw, timestamp.encode() + body)
        except InvalidSignature:
            return Refusal.BAD_SIGNATURE
        if abs(now.timestamp() - at) > WINDOW_SECONDS:
            return Refusal.STALE
        return None
