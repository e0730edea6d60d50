"""Passkeys and their challenges on every store: registered, listed, revoked (and kept),
and a challenge used by exactly one caller, never after it expired."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from signoff.errors import Conflict
from signoff.runtime.store.port import PasskeyChallenge, PasskeyRecord, TaskStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def passkey(n: int, owner: str = "web:alice") -> PasskeyRecord:
    return PasskeyRecord(id=f"pk-{n}", credential_id=f"cred{n}", owner=owner, name=f"key {n}",
                         public_key="pub", sign_count=0, rp_id="localhost",
                         created_at=NOW + timedelta(seconds=n))


async def test_passkeys_are_listed_revoked_and_kept(store: TaskStore) -> None:
    """A registered passkey reads back whole; a revoked one stays listed with its time, a
    second revocation or an unknown id changes nothing, and the counter is kept."""
    await store.add_passkey(passkey(1))
    await store.add_passkey(passkey(2, owner="web:bob"))
    assert [p.id for p in await store.passkeys()] == ["pk-1", "pk-2"]
    assert await store.passkey("cred1") == passkey(1)
    assert await store.passkey("nope") is None
    assert await store.revoke_passkey("pk-1", at=NOW)
    assert not await store.revoke_passkey("pk-1", at=NOW)
    assert not await store.revoke_passkey("pk-9", at=NOW)
    await store.passkey_signed("cred2", 7)
    found = {p.id: p for p in await store.passkeys()}
    assert found["pk-1"].revoked_at == NOW and found["pk-2"].sign_count == 7


async def test_a_credential_is_registered_once(store: TaskStore) -> None:
    """The same credential id cannot be registered twice (Conflict)."""
    await store.add_passkey(passkey(1))
    with pytest.raises(Conflict):
        await store.add_passkey(passkey(1, owner="web:bob"))


async def test_a_challenge_is_used_once_and_never_after_expiry(store: TaskStore) -> None:
    """Of racing uses of one challenge exactly one wins (a replay finds it used); an
    expired one cannot be used, and expired ones are forgotten when a new one is stored."""
    live = PasskeyChallenge(challenge="c1", purpose="decide", owner="web:alice",
                            expires_at=NOW + timedelta(minutes=5), approval_id="a-1",
                            fingerprint="f" * 64, decision="once", nonce="n")
    old = PasskeyChallenge(challenge="c0", purpose="register", owner="web:alice",
                           expires_at=NOW + timedelta(seconds=1))
    await store.add_passkey_challenge(old, now=NOW)
    await store.add_passkey_challenge(live, now=NOW)
    assert await store.passkey_challenge("c1") == live
    wins = await asyncio.gather(*(store.use_passkey_challenge("c1", at=NOW) for _ in range(5)))
    assert sorted(wins) == [False, False, False, False, True]
    assert (await store.passkey_challenge("c1")).used_at == NOW  # type: ignore[union-attr]
    assert not await store.use_passkey_challenge("c0", at=NOW + timedelta(seconds=2))
    later = PasskeyChallenge(challenge="c2", purpose="register", owner="web:alice",
                             expires_at=NOW + timedelta(hours=1))
    await store.add_passkey_challenge(later, now=NOW + timedelta(seconds=2))
    assert await store.passkey_challenge("c0") is None


async def test_the_signature_counter_only_moves_forward(store: TaskStore) -> None:
    """The counter is a compare-and-set: of racing assertions with one counter value one
    moves it, a lower or equal one never does (nor lowers it), and an authenticator
    without a counter (0 stays 0) is never refused for it."""
    await store.add_passkey(passkey(1))
    await store.add_passkey(passkey(2))
    wins = await asyncio.gather(*(store.passkey_signed("cred1", 5) for _ in range(4)))
    assert sorted(wins) == [False, False, False, True]
    assert not await store.passkey_signed("cred1", 3)
    assert (await store.passkey("cred1")).sign_count == 5  # type: ignore[union-attr]
    assert await store.passkey_signed("cred1", 6)
    assert await store.passkey_signed("cred2", 0) and await store.passkey_signed("cred2", 0)
    assert not await store.passkey_signed("nope", 1)
