"""Passkeys (WebAuthn) for step-up: a decision that a person's authenticator signed.

With ``approvals.step_up_with = "passkey"``, a request of a risk class listed in
``approvals.step_up`` is decided only with a fresh WebAuthn assertion, made with user
verification, over a challenge that names *this* request, *its action* and *this answer*:

    challenge = sha256( len‖"signoff passkey step-up v1" ‖ len‖approval id
                        ‖ len‖action fingerprint ‖ len‖decision ‖ len‖nonce )

(each part prefixed with its 4-byte length, so no two inputs run together). The nonce is
32 random bytes drawn when the person asks for the options; the challenge is stored,
bound to the asking person and to those inputs, and used once: the compare-and-set that
marks it used (`TaskStore.use_passkey_challenge`) is won by exactly one assertion, so a
replay, or an assertion made for another request or another decision, decides nothing.
The derivation needs no secret on purpose: whoever holds the audit event (or a receipt)
can recompute the challenge from the approval id, the fingerprint, the decision and the
stored nonce, and check the signature with the passkey's stored public key, without
trusting the server's word (`reverify`). Unpredictability comes from the nonce; that only
the server hands out challenges comes from the single-use store.

The relying party is the host of ``daemon.public_url`` (else ``localhost``); an assertion
is accepted only from that origin (without ``public_url``: any ``http(s)://localhost``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import (
    decode_credential_public_key,
    decoded_public_key_to_cryptography,
    verify_signature,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from signoff.errors import Conflict, SignoffError
from signoff.runtime.clock import Clock
from signoff.runtime.models import Approval, AuditEvent, JsonDict, Scope
from signoff.runtime.people import People
from signoff.runtime.store.port import PasskeyChallenge, PasskeyRecord, TaskStore

LABEL = b"signoff passkey step-up v1"
CHALLENGE_TTL = timedelta(minutes=5)  # how long options stay usable
TIMEOUT_MS = 120_000  # what the browser is told to wait for the person
REGISTER_PAGE = "/console/passkeys"
_UV = 0x04  # authenticatorData flags: user verified


class PasskeyRefused(SignoffError):
    """The passkey step-up refused this: no, a wrong, a used or an invalid assertion."""


class NoPasskey(PasskeyRefused):
    """The person has no live passkey to confirm with."""

    def __init__(self, actor: str) -> None:
        super().__init__(f"{actor} has no passkey: register one in the console at "
                         f"{REGISTER_PAGE} (Passkeys), then decide again")


def b64url(data: bytes) -> str:
    """Unpadded base64url, as WebAuthn's JSON forms write bytes."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """The bytes of unpadded base64url; ValueError for anything else."""
    if not isinstance(text, str) or len(text) > 20_000:
        raise ValueError("not a base64url string")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not a base64url string") from exc


def bound_challenge(approval_id: str, fingerprint: str, decision: str, nonce: bytes) -> bytes:
    """The challenge of one answer to one request (see the module docstring)."""
    digest = hashlib.sha256()
    for part in (LABEL, approval_id.encode(), fingerprint.encode(), decision.encode(), nonce):
        digest.update(len(part).to_bytes(4, "big"))
        digest.update(part)
    return digest.digest()


@dataclass(frozen=True)
class RelyingParty:
    """Who the passkeys are made for: ``id`` (a host) and the origin assertions come from
    (None: any http or https origin on ``localhost``)."""

    id: str
    origin: str | None = None
    name: str = "signoff"

    @classmethod
    def of(cls, public_url: str | None) -> RelyingParty:
        """The host of ``daemon.public_url``, else ``localhost``."""
        if not public_url:
            return cls("localhost")
        parts = urlsplit(public_url)
        host = (parts.hostname or "localhost").lower()
        scheme = parts.scheme.lower()
        # A browser writes its origin without the scheme's default port.
        port = "" if parts.port in (None, {"https": 443, "http": 80}.get(scheme)) \
            else f":{parts.port}"
        return cls(host, f"{scheme}://{host}{port}")

    def allows(self, origin: str) -> bool:
        """Whether a browser page at ``origin`` may use these passkeys."""
        if self.origin is not None:
            return origin.lower() == self.origin
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.hostname == "localhost" \
            and not parts.path


def client_data(credential: JsonDict) -> JsonDict:
    """The parsed clientDataJSON of a credential in WebAuthn's JSON form."""
    response = credential.get("response")
    if not isinstance(response, dict):
        raise PasskeyRefused("passkey: the assertion has no response")
    try:
        parsed = json.loads(unb64url(str(response.get("clientDataJSON", ""))))
    except ValueError as exc:
        raise PasskeyRefused("passkey: clientDataJSON is not base64url JSON") from exc
    if not isinstance(parsed, dict):
        raise PasskeyRefused("passkey: clientDataJSON is not a JSON object")
    return parsed


def evidence_of(credential: JsonDict, *, decision: str, nonce: str, rp_id: str) -> JsonDict:
    """What the audit event keeps of an accepted assertion: enough to verify it again."""
    response = credential["response"]
    kept = {"credential_id": str(credential.get("id", "")),
            "authenticator_data": str(response.get("authenticatorData", "")),
            "client_data_json": str(response.get("clientDataJSON", "")),
            "signature": str(response.get("signature", "")),
            "user_handle": response.get("userHandle") or None}
    return {**kept, "decision": decision, "nonce": nonce, "rp_id": rp_id}


def reverify(event: AuditEvent, passkey: PasskeyRecord | None) -> str | None:
    """What is wrong with the assertion an audit event keeps, or None: the signature over
    authenticatorData ‖ sha256(clientDataJSON) with the passkey's public key, the
    challenge bound to this event's request, fingerprint and decision, and the relying
    party and user verification flags."""
    kept = event.passkey or {}
    try:
        if passkey is None or passkey.credential_id != kept.get("credential_id"):
            return "its passkey is not registered here"
        auth_data = unb64url(str(kept.get("authenticator_data")))
        data_json = unb64url(str(kept.get("client_data_json")))
        signature = unb64url(str(kept.get("signature")))
        nonce = unb64url(str(kept.get("nonce")))
        decision = str(kept.get("decision"))
        if not _covers(event, decision):
            return f"the assertion was made for '{decision}', not this decision"
        expected = bound_challenge(event.approval_id or "", event.fingerprint or "",
                                   decision, nonce)
        data = json.loads(data_json)
        if not isinstance(data, dict) or data.get("type") != "webauthn.get" \
                or data.get("challenge") != b64url(expected):
            return "its challenge is not the one bound to this request and decision"
        if len(auth_data) < 37 or auth_data[:32] != hashlib.sha256(
                passkey.rp_id.encode()).digest() or not auth_data[32] & _UV:
            return "its authenticator data is not for this relying party with user verification"
        key = decode_credential_public_key(unb64url(passkey.public_key))
        verify_signature(public_key=decoded_public_key_to_cryptography(key),
                         signature_alg=key.alg, signature=signature,
                         data=auth_data + hashlib.sha256(data_json).digest())
    except InvalidSignature:
        return "its signature does not verify"
    except (ValueError, WebAuthnException) as exc:
        return f"it cannot be read ({type(exc).__name__})"
    return None


def _covers(event: AuditEvent, decision: str) -> bool:
    """A deny was signed as deny; an approval as an approval no narrower than the scope
    the event grants (a quorum grants the narrowest scope of its votes)."""
    order = [Scope.ONCE.value, Scope.SESSION.value, Scope.ALWAYS.value]
    if event.decision == "deny" or decision == Scope.DENY.value:
        return event.decision == "deny" and decision == Scope.DENY.value
    return decision in order and (event.scope or "") in order \
        and order.index(event.scope or "") <= order.index(decision)


class Passkeys:
    """Registration, options and assertion checks against one store and relying party."""

    def __init__(self, *, store: TaskStore, clock: Clock, rp: RelyingParty,
                 people: People) -> None:
        self.store = store
        self.clock = clock
        self.rp = rp
        self.people = people

    async def owned(self, actor: str, *, live: bool = True) -> list[PasskeyRecord]:
        """The passkeys of ``actor``'s person (any of their accounts)."""
        return [p for p in await self.store.passkeys() if self.people.same(p.owner, actor)
                and (p.revoked_at is None or not live)]

    async def registration_options(self, actor: str) -> JsonDict:
        """WebAuthn creation options for a new passkey of ``actor``'s person."""
        person = self.people.name(actor)
        options = generate_registration_options(
            rp_id=self.rp.id, rp_name=self.rp.name, user_name=person,
            user_id=hashlib.sha256("\0".join(self.people.person(actor)).encode()).digest()[:16],
            timeout=TIMEOUT_MS,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.PREFERRED,
                user_verification=UserVerificationRequirement.REQUIRED),
            exclude_credentials=[PublicKeyCredentialDescriptor(id=unb64url(p.credential_id))
                                 for p in await self.owned(actor)])
        await self._remember(PasskeyChallenge(challenge=b64url(options.challenge),
                                              purpose="register", owner=actor,
                                              expires_at=self.clock.now() + CHALLENGE_TTL))
        parsed: JsonDict = json.loads(options_to_json(options))
        return parsed

    async def register(self, actor: str, name: str, credential: JsonDict) -> PasskeyRecord:
        """Check a new credential against the options handed out, and store it."""
        challenge = await self._take(credential, "register", actor)
        try:
            verified = verify_registration_response(
                credential=credential, expected_challenge=unb64url(challenge.challenge),
                expected_rp_id=self.rp.id, expected_origin=self._origin(credential),
                require_user_verification=True)
        except WebAuthnException as exc:
            raise PasskeyRefused(f"passkey: the registration does not verify ({exc})") from exc
        await self._use(challenge)
        record = PasskeyRecord(id=f"pk-{secrets.token_hex(6)}",
                               credential_id=b64url(verified.credential_id), owner=actor,
                               name=name, public_key=b64url(verified.credential_public_key),
                               sign_count=verified.sign_count, rp_id=self.rp.id,
                               created_at=self.clock.now())
        try:
            await self.store.add_passkey(record)
        except Conflict as exc:
            raise PasskeyRefused("passkey: this credential is registered already") from exc
        return record

    async def revoke(self, actor: str, passkey_id: str, *, anyone: bool = False) -> bool:
        """Revoke a passkey of ``actor``'s person (``anyone``: of any person, for admins);
        False when there is no such live passkey."""
        mine = [p for p in await self.store.passkeys() if p.id == passkey_id
                and (anyone or self.people.same(p.owner, actor))]
        return bool(mine) and await self.store.revoke_passkey(passkey_id, at=self.clock.now())

    async def request_options(self, actor: str, approval: Approval, decision: Scope) -> JsonDict:
        """WebAuthn request options whose challenge is bound to ``approval``, its action's
        fingerprint and ``decision``; `NoPasskey` when ``actor`` has none."""
        owned = await self.owned(actor)
        if not owned:
            raise NoPasskey(actor)
        nonce = secrets.token_bytes(32)
        fingerprint = approval.action.fingerprint or ""
        value = bound_challenge(approval.id, fingerprint, decision.value, nonce)
        options = generate_authentication_options(
            rp_id=self.rp.id, challenge=value, timeout=TIMEOUT_MS,
            user_verification=UserVerificationRequirement.REQUIRED,
            allow_credentials=[PublicKeyCredentialDescriptor(id=unb64url(p.credential_id))
                               for p in owned])
        await self._remember(PasskeyChallenge(
            challenge=b64url(value), purpose="decide", owner=actor,
            expires_at=self.clock.now() + CHALLENGE_TTL, approval_id=approval.id,
            fingerprint=fingerprint, decision=decision.value,
            nonce=b64url(nonce)))
        parsed: JsonDict = json.loads(options_to_json(options))
        return parsed

    async def check(self, actor: str, approval: Approval, decision: Scope,
                    credential: JsonDict) -> JsonDict:
        """Accept one assertion for this answer (using its challenge up), or raise
        `PasskeyRefused` saying why; returns what the audit event keeps."""
        challenge = await self._take(credential, "decide", actor)
        if challenge.approval_id != approval.id:
            raise PasskeyRefused("passkey: this assertion was made for another request")
        if challenge.decision != decision.value:
            raise PasskeyRefused(f"passkey: this assertion was made for '{challenge.decision}'"
                                 f", not '{decision.value}'")
        if challenge.fingerprint != (approval.action.fingerprint or ""):
            raise PasskeyRefused("passkey: the action changed since the assertion was made")
        passkey = await self.store.passkey(str(credential.get("id", ""))[:2000])
        if passkey is None or not self.people.same(passkey.owner, actor):
            raise PasskeyRefused("passkey: this passkey is not one of yours")
        if passkey.revoked_at is not None:
            raise PasskeyRefused(f"passkey: '{passkey.name}' was revoked")
        try:
            verified = verify_authentication_response(
                credential=credential, expected_challenge=unb64url(challenge.challenge),
                expected_rp_id=self.rp.id, expected_origin=self._origin(credential),
                credential_public_key=unb64url(passkey.public_key),
                credential_current_sign_count=passkey.sign_count,
                require_user_verification=True)
        except WebAuthnException as exc:
            raise PasskeyRefused(f"passkey: the assertion does not verify ({exc})") from exc
        await self._use(challenge)
        # The counter moves forward by compare-and-set: two assertions checked at once
        # against the same stored counter (a cloned authenticator racing its original, on
        # one node or two) would both pass the check above; only one moves it.
        if not await self.store.passkey_signed(passkey.credential_id,
                                               verified.new_sign_count):
            raise PasskeyRefused("passkey: an assertion with the same or a later signature "
                                 "counter was accepted from this passkey meanwhile (a "
                                 "cloned authenticator?): ask for new options")
        return evidence_of(credential, decision=decision.value, nonce=challenge.nonce or "",
                           rp_id=self.rp.id)

    async def _remember(self, challenge: PasskeyChallenge) -> None:
        await self.store.add_passkey_challenge(challenge, now=self.clock.now())

    async def _take(self, credential: JsonDict, purpose: str, actor: str) -> PasskeyChallenge:
        """The stored, unused challenge a credential answers, handed to ``actor``."""
        value = client_data(credential).get("challenge")
        stored = await self.store.passkey_challenge(value) if isinstance(value, str) \
            and len(value) <= 100 else None
        if stored is None or stored.purpose != purpose:
            raise PasskeyRefused("passkey: this assertion answers no challenge signoff handed "
                                 "out (or it expired): ask for new options")
        if stored.used_at is not None:
            raise PasskeyRefused("passkey: this assertion was used already (a replay)")
        if stored.expires_at <= self.clock.now():
            raise PasskeyRefused("passkey: the options expired: ask for new ones")
        if not self.people.same(stored.owner, actor):
            raise PasskeyRefused("passkey: these options were handed to someone else")
        return stored

    async def _use(self, challenge: PasskeyChallenge) -> None:
        if not await self.store.use_passkey_challenge(challenge.challenge, at=self.clock.now()):
            raise PasskeyRefused("passkey: this assertion was used already (a replay)")

    def _origin(self, credential: JsonDict) -> str:
        origin = client_data(credential).get("origin")
        if not isinstance(origin, str) or not self.rp.allows(origin):
            raise PasskeyRefused(f"passkey: made on {origin!r}, not on this console's origin")
        return origin


def assertion_check(store: TaskStore) -> Callable[[AuditEvent], Awaitable[str | None]]:
    """`audit.verify`'s check of decisions confirmed with a passkey: the stored assertion
    must verify again against the stored passkey (a chain re-sealed after an edit would not
    notice an assertion swapped or altered)."""
    async def check(event: AuditEvent) -> str | None:
        if event.passkey is None:
            return None
        credential = str(event.passkey.get("credential_id") or "")[:2000]
        problem = reverify(event, await store.passkey(credential) if credential else None)
        return f"event {event.id}'s passkey assertion fails: {problem}" if problem else None
    return check
