"""The statements of passkeys and their challenges on the SQL store (SQLite and PostgreSQL).

Passkeys are kept after revocation (``revoked_at``) so that stored assertions can still be
re-verified; challenges are deleted once expired, and a challenge is used by one
compare-and-set UPDATE (``used_at IS NULL``), which exactly one of any number of racing
callers wins on either database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from signoff.runtime.store.port import PasskeyChallenge, PasskeyRecord
from signoff.runtime.store.sql.tables import PasskeyChallengeRow, PasskeyRow

passkeys_t = PasskeyRow.__table__  # type: ignore[attr-defined]
challenges_t = PasskeyChallengeRow.__table__  # type: ignore[attr-defined]
_PASSKEY_FIELDS = ("id", "credential_id", "owner", "name", "public_key", "sign_count",
                   "rp_id", "created_at", "revoked_at")
_CHALLENGE_FIELDS = ("challenge", "purpose", "owner", "expires_at", "approval_id",
                     "fingerprint", "decision", "nonce", "used_at")


def _passkey(row: Any) -> PasskeyRecord:
    return PasskeyRecord(**{f: getattr(row, f) for f in _PASSKEY_FIELDS})


def add(conn: Connection, passkey: PasskeyRecord) -> None:
    """Insert a passkey (IntegrityError for a credential registered already)."""
    conn.execute(passkeys_t.insert().values(
        **{f: getattr(passkey, f) for f in _PASSKEY_FIELDS}))


def listed(conn: Connection) -> list[PasskeyRecord]:
    """Every passkey, oldest first."""
    rows = conn.execute(sa.select(passkeys_t).order_by(passkeys_t.c.created_at,
                                                       passkeys_t.c.id))
    return [_passkey(r) for r in rows]


def by_credential(conn: Connection, credential_id: str) -> PasskeyRecord | None:
    """One passkey by its credential id."""
    row = conn.execute(sa.select(passkeys_t).where(
        passkeys_t.c.credential_id == credential_id)).first()
    return _passkey(row) if row is not None else None


def revoke(conn: Connection, passkey_id: str, at: datetime) -> bool:
    """Revoke a live passkey; False when unknown or revoked already."""
    done = conn.execute(passkeys_t.update().where(
        passkeys_t.c.id == passkey_id, passkeys_t.c.revoked_at.is_(None)).values(revoked_at=at))
    return bool(done.rowcount)


def signed(conn: Connection, credential_id: str, sign_count: int) -> bool:
    """Move the authenticator's signature counter forward; True for the one caller that
    did (a counter of 0 that stays 0: an authenticator without one, always)."""
    grows = passkeys_t.c.sign_count < sign_count
    if sign_count == 0:
        grows = passkeys_t.c.sign_count == 0
    done = conn.execute(passkeys_t.update().where(passkeys_t.c.credential_id == credential_id,
                                                  grows).values(sign_count=sign_count))
    return bool(done.rowcount)


def add_challenge(conn: Connection, challenge: PasskeyChallenge, now: datetime) -> None:
    """Insert a challenge; delete the expired ones."""
    conn.execute(challenges_t.delete().where(challenges_t.c.expires_at <= now))
    conn.execute(challenges_t.insert().values(
        **{f: getattr(challenge, f) for f in _CHALLENGE_FIELDS}))


def challenge(conn: Connection, value: str) -> PasskeyChallenge | None:
    """One challenge, or None."""
    row = conn.execute(sa.select(challenges_t).where(challenges_t.c.challenge == value)).first()
    return (PasskeyChallenge(**{f: getattr(row, f) for f in _CHALLENGE_FIELDS})
            if row is not None else None)


def use(conn: Connection, value: str, at: datetime) -> bool:
    """Mark an unused, unexpired challenge used; True for the one caller that did."""
    done = conn.execute(challenges_t.update().where(
        challenges_t.c.challenge == value, challenges_t.c.used_at.is_(None),
        challenges_t.c.expires_at > at).values(used_at=at))
    return bool(done.rowcount)
