"""The tamper-evident audit log: events sealed into a sha256 hash chain.

Each event stores the hash of the event before it and its own hash over its canonical
JSON (id and prev_hash included), so editing, deleting or reordering any row breaks the
chain. A chain cannot notice a cut tail by itself: `head()` gives (count, hash) to keep
elsewhere, and `verify(expect_head=...)` proves a later log still contains it.

Stores read rows through `from_row`, so a row edited into something that is no longer an
event (invalid JSON, `"at": "yesterday"`) comes back as an `unreadable` stand-in that
verification reports as altered, instead of an exception that stops the walk.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.models import AuditEvent
from signoff.runtime.signing import PublicKey, Signer, check_signature, key_id_of, unb64u

GENESIS = "0" * 64
UNREADABLE = "unreadable"  # kind of the stand-in for a row that holds no valid event
# The stand-in's time: the row's own stamp cannot be trusted or even read.
_UNKNOWN_AT = datetime(1970, 1, 1, tzinfo=UTC)


def _why(exc: ValidationError) -> str:
    """pydantic's complaint in one short line, without echoing the stored value."""
    parts = [f"{'.'.join(map(str, e['loc'])) or 'data'}: {e['msg']}"
             for e in exc.errors(include_url=False)[:3]]
    return "; ".join(parts)[:300]


def from_row(row_id: int, data: str) -> AuditEvent:
    """The event stored in row ``row_id`` (the row id is authoritative), or a stand-in of
    kind ``unreadable`` whose reason says why the row holds no valid event."""
    try:
        event = AuditEvent.model_validate_json(data)
    except ValidationError as exc:  # also what pydantic raises for text that is not JSON
        return _unreadable(row_id, _why(exc))
    # pydantic reads NaN and Infinity (and 1e999) into a float field, which no sealed
    # event holds and canonical JSON cannot spell: such a row stopped `verify` with a
    # ValueError (and broke every page listing it) instead of being reported.
    odd = [name for name in _FLOATS if not math.isfinite(getattr(event, name) or 0.0)]
    if odd:
        return _unreadable(row_id, f"{odd[0]}: a number JSON cannot spell (NaN or Infinity)")
    return event if event.id == row_id else event.model_copy(update={"id": row_id})


_FLOATS = tuple(name for name, field in AuditEvent.model_fields.items()
                if field.annotation in (float, float | None))


def _unreadable(row_id: int, why: str) -> AuditEvent:
    return AuditEvent(id=row_id, at=_UNKNOWN_AT, kind=UNREADABLE,
                      reason=f"its stored data is not a valid audit event: {why}")


# Fields added after events were first sealed: left out of the digest while unset, so the
# hashes of events written before them (and of events that never use them) stay the same.
_LATER_FIELDS = ("original_fingerprint", "passkey", "args_digest")
# The hash itself and the signature over it are not part of what is hashed.
_UNHASHED = ("hash", "kid", "sig")


def new_args_key() -> str:
    """A fresh secret for one request's `commit_args` (256 bits, base64url)."""
    return secrets.token_urlsafe(32)


def commit_args(key: str, args: Mapping[str, Any]) -> str:
    """The commitment an audit event keeps to an action's args: HMAC-SHA256 under the
    request's own secret key, so a receipt pins the exact content approved without
    showing it. A plain hash would let anyone holding a receipt confirm a guess of a
    short body ("yes", an amount); with the key, only someone the key is shown to can
    check the args they are shown (`signoff receipt ID --reveal`)."""
    return hmac.new(unb64u(key), canonical_json(dict(args)).encode(),
                    hashlib.sha256).hexdigest()


def digest_of(body: Mapping[str, Any]) -> str:
    """The chain hash of an event given as its JSON object (``model_dump(mode="json")``):
    what `seal` stores and what a receipt's verifier recomputes without the database."""
    kept = {name: value for name, value in body.items()
            if name not in _UNHASHED and not (name in _LATER_FIELDS and value is None)}
    return sha256_hex(canonical_json(kept))


def _digest(event: AuditEvent) -> str:
    return digest_of(event.model_dump(mode="json"))


def seal(event: AuditEvent, *, event_id: int, prev_hash: str,
         signer: Signer | None = None) -> AuditEvent:
    """Give an event its place in the chain: id, the previous hash, its own hash, and
    (with a ``signer``) the node's signature over that hash."""
    placed = event.model_copy(update={"id": event_id, "prev_hash": prev_hash, "hash": "",
                                      "kid": None, "sig": None})
    digest = _digest(placed)
    kid, sig = signer.sign(digest) if signer is not None else (None, None)
    return placed.model_copy(update={"hash": digest, "kid": kid, "sig": sig})


class Sealer:
    """How a store seals a change's events onto its chain: in order, stamped with the
    change's time, signed by ``signer`` when there is one. It remembers which keys the
    database already lists: a key's first event comes with its `PublicKey` row, written
    in the same transaction, so no signed event is ever stored without its key."""

    def __init__(self, signer: Signer | None = None) -> None:
        self.signer = signer
        self.published: set[str] = set()

    def seal(self, events: list[AuditEvent], *, count: int, prev: str, at: datetime
             ) -> tuple[list[AuditEvent], list[PublicKey]]:
        """The events sealed after event ``count`` (hash ``prev``), and the keys to list."""
        sealed: list[AuditEvent] = []
        fresh: dict[str, PublicKey] = {}
        for event in events:
            count += 1
            event.at = at  # sealed at the time of the change it records
            done = seal(event, event_id=count, prev_hash=prev, signer=self.signer)
            if (self.signer is not None and done.kid is not None
                    and done.kid not in self.published and done.kid not in fresh):
                fresh[done.kid] = PublicKey(kid=done.kid,
                                            public_key=self.signer.public_key(done.kid),
                                            node_id=self.signer.node_id, created_at=at,
                                            since=count)
            prev = done.hash
            sealed.append(done)
        return sealed, list(fresh.values())

    def committed(self, sealed: list[AuditEvent]) -> None:
        """The change holding ``sealed`` committed: their keys are listed now."""
        self.published.update(e.kid for e in sealed if e.kid is not None)


class AuditChain(Protocol):
    """What `verify` reads of a store (every `TaskStore` has it). Named here, not taken
    from the store's port, because the stores seal events with this module: the chain
    sits below the store."""

    async def audit_chain(self, *, after: int = 0, limit: int = 10_000) -> list[AuditEvent]:
        """Sealed events with ids above ``after``, in order, at most ``limit``."""
        ...

    async def audit_head(self) -> tuple[int, str]:
        """The head record: (count, hash of the last event)."""
        ...

    async def signing_keys(self) -> list[PublicKey]:
        """Every node's published signing key, retired ones included."""
        ...


@dataclass(frozen=True)
class Verification:
    """The result of walking the chain."""

    ok: bool
    count: int
    head: str
    problem: str | None = None
    bad_event: int | None = None
    signed: int = 0


def check_event(event: AuditEvent, *, expected_id: int, prev_hash: str) -> str | None:
    """What is wrong with one event in its place, or None."""
    if event.id != expected_id:
        return f"event {expected_id} is missing or out of order (found id {event.id})"
    if event.kind == UNREADABLE:
        return f"event {event.id} was altered ({event.reason})"
    if event.prev_hash != prev_hash:
        return f"event {event.id} does not follow the event before it (chain broken)"
    if _digest(event) != event.hash:
        return f"event {event.id} was altered (hash mismatch)"
    return None


@dataclass(frozen=True)
class Signatures:
    """What `verify` checks signatures against: the published keys by kid, and the first
    event from which every event must be signed (the earliest a published key covers)."""

    keys: Mapping[str, str]
    signed_from: int | None
    # The kids of the keys the verifier was told to trust (None: every published key).
    # Whoever can write the database can publish a key of their own beside the node's and
    # sign a rewritten log with it; only a key pinned outside the database tells.
    trusted: frozenset[str] | None = None

    @classmethod
    def of(cls, published: list[PublicKey], trusted: Iterable[str] | None = None
           ) -> Signatures:
        """From the database's key list, and the public keys (base64url) to trust."""
        kids = None if trusted is None else frozenset(key_id_of(t) for t in trusted)
        return cls(keys={k.kid: k.public_key for k in published},
                   signed_from=min((k.since for k in published), default=None), trusted=kids)

    def problem(self, event: AuditEvent) -> str | None:
        """What is wrong with an event's signature, or None."""
        if event.sig is None or event.kid is None:
            if self.signed_from is not None and event.id >= self.signed_from:
                return (f"event {event.id} is not signed (events are signed from event "
                        f"{self.signed_from} on)")
            return None
        if self.trusted is not None and event.kid not in self.trusted:
            return (f"event {event.id} is signed by key {event.kid}, which is not one of "
                    "the keys you trust (--key)")
        public = self.keys.get(event.kid)
        if public is None:
            return f"event {event.id} is signed by key {event.kid}, which is not published"
        why = check_signature(public, event.kid, event.hash, event.sig)
        return f"event {event.id} has a bad signature: {why}" if why else None


# A check of one event beyond its place in the chain and its signature (the passkey
# assertions, `signoff.runtime.passkeys.assertion_check`): what is wrong, or None.
EventCheck = Callable[[AuditEvent], Awaitable[str | None]]


async def verify(store: AuditChain, *, expect_head: tuple[int, str] | None = None,
                 batch: int = 20_000, check: EventCheck | None = None,
                 trusted: Iterable[str] | None = None) -> Verification:
    """Re-walk the whole chain, checking each signature against the published keys (and
    each event with ``check``: `signoff audit --verify` re-verifies passkey assertions);
    name the first bad event. With ``trusted`` (base64url public keys kept outside the
    database), every signed event must be signed by one of them."""
    signatures = Signatures.of(await store.signing_keys(), trusted)
    prev, count, after, signed = GENESIS, 0, 0, 0
    seen_expected = expect_head is None
    while True:
        events = await store.audit_chain(after=after, limit=batch)
        if not events:
            break
        for event in events:
            problem = (check_event(event, expected_id=count + 1, prev_hash=prev)
                       or signatures.problem(event))
            if problem is None and check is not None:
                problem = await check(event)
            if problem:
                return Verification(False, count, prev, problem, event.id, signed)
            prev, count = event.hash, count + 1
            signed += event.sig is not None
            if expect_head and count == expect_head[0]:
                if event.hash != expect_head[1]:
                    return Verification(False, count, prev,
                                        f"event {count} is not the expected head", count)
                seen_expected = True
        after = events[-1].id
    stored_count, stored_head = await store.audit_head()
    if (stored_count, stored_head) != (count, prev):
        return Verification(False, count, prev,
                            f"the log ends at event {count} but its head record says "
                            f"{stored_count}: events were removed", count + 1)
    if not seen_expected and expect_head:
        return Verification(False, count, prev,
                            f"the log has {count} events; expected head {expect_head[0]} "
                            "is missing (the tail was cut)", count + 1)
    return Verification(True, count, prev, signed=signed)
