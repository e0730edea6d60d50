"""Passkey step-up on the server, without a browser: a small software authenticator (P-256,
"none" attestation, the WebAuthn JSON forms) against `signoff.runtime.passkeys` on the
in-memory store and a FakeClock — the challenge binding, expiry, ownership, and the
audit re-check of a stored assertion."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any, cast

import pytest

from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, Approval, AuditEvent, RiskClass, Scope
from signoff.runtime.passkeys import (
    NoPasskey,
    PasskeyRefused,
    Passkeys,
    RelyingParty,
    b64url,
    bound_challenge,
    evidence_of,
    reverify,
    unb64url,
)
from signoff.runtime.people import People
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import PasskeyRecord, TaskStore
from tests.fakes.authenticator import SoftAuthenticator


def approval(n: int = 1) -> Approval:
    action = Action(tool="send_webhook", args={"n": n}, risk=RiskClass.SEND,
                    fingerprint=f"{n:064x}")
    return Approval(id=f"a-{n}", task_id=f"t-{n}", action=action,
                    allowed_scopes=[Scope.ONCE, Scope.SESSION, Scope.DENY],
                    expires_at=FakeClock().now() + timedelta(hours=1))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def keys(clock: FakeClock) -> Passkeys:
    people = People.of([("alice", ["web:alice", "web:alice-phone"])])
    return Passkeys(store=MemTaskStore(), clock=clock, rp=RelyingParty.of(None), people=people)


async def registered(keys: Passkeys, actor: str = "web:alice") -> SoftAuthenticator:
    device = SoftAuthenticator()
    made = device.create(await keys.registration_options(actor))
    await keys.register(actor, "laptop", made)
    return device


async def test_challenge_binds_every_part_unambiguously() -> None:
    """The challenge changes with the request, the fingerprint, the decision and the nonce,
    and parts never run together ("a"+"bc" is not "ab"+"c")."""
    base = bound_challenge("a-1", "f", "once", b"n")
    others = [bound_challenge("a-2", "f", "once", b"n"), bound_challenge("a-1", "g", "once", b"n"),
              bound_challenge("a-1", "f", "deny", b"n"), bound_challenge("a-1", "f", "once", b"m")]
    assert base not in others and len(set(others)) == 4
    assert bound_challenge("a", "bc", "once", b"") != bound_challenge("ab", "c", "once", b"")


def test_relying_party_follows_public_url() -> None:
    """The RP id is public_url's host and only its origin may assert; without it, any
    localhost port (and nothing else)."""
    public = RelyingParty.of("https://Signoff.example.com:8443/base")
    assert (public.id, public.origin) == ("signoff.example.com",
                                          "https://signoff.example.com:8443")
    assert public.allows("https://signoff.example.com:8443")
    assert not public.allows("https://evil.example.com:8443")
    assert RelyingParty.of("https://signoff.example.com:443").origin == \
        "https://signoff.example.com"
    local = RelyingParty.of(None)
    assert local.id == "localhost" and local.allows("http://localhost:51234")
    assert not local.allows("http://127.0.0.1:51234")
    assert not local.allows("https://localhost.evil.com")


async def test_a_valid_assertion_is_accepted_once(keys: Passkeys) -> None:
    """An assertion over options for this request and answer is accepted and kept whole;
    the same one again is a replay; another person's key cannot use it."""
    device = await registered(keys)
    request = approval()
    made = device.get(await keys.request_options("web:alice", request, Scope.ONCE))
    with pytest.raises(PasskeyRefused, match="someone else"):
        await keys.check("web:bob", request, Scope.ONCE, made)
    kept = await keys.check("web:alice-phone", request, Scope.ONCE, made)  # same person
    assert kept["credential_id"] == made["id"] and kept["decision"] == "once"
    with pytest.raises(PasskeyRefused, match="used already"):
        await keys.check("web:alice", request, Scope.ONCE, made)


async def test_expired_options_decide_nothing(keys: Passkeys, clock: FakeClock) -> None:
    """Options older than five minutes are refused, even with a valid signature."""
    device = await registered(keys)
    request = approval()
    made = device.get(await keys.request_options("web:alice", request, Scope.DENY))
    clock.advance(timedelta(minutes=5, seconds=1))
    with pytest.raises(PasskeyRefused, match="expired"):
        await keys.check("web:alice", request, Scope.DENY, made)


async def test_wrong_origin_and_changed_action_are_refused(keys: Passkeys) -> None:
    """An assertion made on another origin, or after the action changed, is refused."""
    device = await registered(keys)
    request = approval()
    elsewhere = device.get(await keys.request_options("web:alice", request, Scope.ONCE),
                           origin="http://evil.test")
    with pytest.raises(PasskeyRefused, match="origin"):
        await keys.check("web:alice", request, Scope.ONCE, elsewhere)
    made = device.get(await keys.request_options("web:alice", request, Scope.ONCE))
    changed = request.model_copy(update={"action": request.action.model_copy(
        update={"fingerprint": "e" * 64})})
    with pytest.raises(PasskeyRefused, match="action changed"):
        await keys.check("web:alice", changed, Scope.ONCE, made)


async def test_registration_needs_user_verification_and_fresh_options(keys: Passkeys) -> None:
    """A credential made without user verification, or over options never handed out, is
    not registered; a person without passkeys gets no options but is told how to get one."""
    device = SoftAuthenticator()
    device.verified = False
    with pytest.raises(PasskeyRefused, match="does not verify"):
        await keys.register("web:alice", "x", device.create(
            await keys.registration_options("web:alice")))
    with pytest.raises(PasskeyRefused, match="no challenge"):
        await keys.register("web:alice", "x", SoftAuthenticator().create(
            {"challenge": b64url(secrets.token_bytes(32))}))
    with pytest.raises(NoPasskey, match="/console/passkeys"):
        await keys.request_options("web:alice", approval(), Scope.ONCE)


async def test_reverify_checks_what_the_audit_keeps(keys: Passkeys) -> None:
    """A kept assertion verifies again for its decision; a wider scope than signed, another
    decision, another request, an altered signature or the wrong key fail."""
    device = await registered(keys)
    request = approval()
    made = device.get(await keys.request_options("web:alice", request, Scope.SESSION))
    kept = await keys.check("web:alice", request, Scope.SESSION, made)
    passkey = (await keys.owned("web:alice"))[0]
    event = AuditEvent(kind="decision", approval_id=request.id, decision="approve",
                       scope="session", fingerprint=request.action.fingerprint, passkey=kept)
    assert reverify(event, passkey) is None
    assert reverify(event.model_copy(update={"scope": "once"}), passkey) is None  # narrower
    assert "not this decision" in (reverify(event.model_copy(update={"scope": "always"}),
                                            passkey) or "")
    assert "not this decision" in (reverify(event.model_copy(update={"decision": "deny",
                                                                     "scope": "deny"}),
                                            passkey) or "")
    assert "challenge" in (reverify(event.model_copy(update={"approval_id": "a-9"}),
                                    passkey) or "")
    bad = bytearray(unb64url(kept["signature"]))
    bad[-1] ^= 1
    altered = event.model_copy(update={"passkey": {**kept, "signature": b64url(bytes(bad))}})
    assert "signature does not verify" in (reverify(altered, passkey) or "")
    other = await registered(keys, "web:carol")
    impostor = (await keys.owned("web:carol"))[0]
    assert other and "not registered" in (reverify(event, impostor) or "")


async def test_reverify_refuses_an_assertion_without_user_verification(keys: Passkeys) -> None:
    """A stored assertion whose authenticator did not verify the person (or was made for
    another relying party) fails the audit re-check even though its signature is sound."""
    device = await registered(keys)
    passkey = (await keys.owned("web:alice"))[0]
    request = approval()
    for verified, rp_id in ((False, "localhost"), (True, "evil.test")):
        device.verified, device.rp_id = verified, rp_id
        options = await keys.request_options("web:alice", request, Scope.ONCE)
        stored = await keys.store.passkey_challenge(options["challenge"])
        assert stored is not None and stored.nonce is not None
        kept = evidence_of(device.get(options), decision="once", nonce=stored.nonce,
                           rp_id="localhost")
        event = AuditEvent(kind="decision", approval_id=request.id, decision="approve",
                           scope="once", fingerprint=request.action.fingerprint, passkey=kept)
        assert "user verification" in (reverify(event, passkey) or "")


class RacingReads:
    """The store as a second checker saw it: every call goes to ``store``, but the passkey
    reads as it was before the other checker's assertion was accepted (two nodes, or two
    requests of one node, each past its read and before its write)."""

    def __init__(self, store: MemTaskStore, before: PasskeyRecord) -> None:
        self.store = store
        self.before = before

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def passkey(self, credential_id: str) -> PasskeyRecord | None:
        return self.before if credential_id == self.before.credential_id else None


async def test_a_cloned_authenticator_racing_its_original_decides_once(keys: Passkeys) -> None:
    """Two assertions with the same signature counter (a copy of the authenticator's key
    used beside the original), each checked against the counter stored before either was
    accepted: one decides, the other is refused as a clone."""
    device = await registered(keys)
    clone = SoftAuthenticator()
    clone.key, clone.credential_id, clone.count = device.key, device.credential_id, device.count
    first, second = approval(1), approval(2)
    made = device.get(await keys.request_options("web:alice", first, Scope.ONCE))
    copied = clone.get(await keys.request_options("web:alice", second, Scope.ONCE))
    before = (await keys.owned("web:alice"))[0]
    await keys.check("web:alice", first, Scope.ONCE, made)
    racing = Passkeys(store=cast(TaskStore, RacingReads(cast(MemTaskStore, keys.store), before)),
                      clock=keys.clock, rp=keys.rp, people=keys.people)
    with pytest.raises(PasskeyRefused, match="cloned"):
        await racing.check("web:alice", second, Scope.ONCE, copied)
