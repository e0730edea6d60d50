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
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError

from signoff.runtime.models import AuditEvent
from signoff.runtime.passkeys import reverify
from signoff.runtime.store.port import TaskStore

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
        return AuditEvent(id=row_id, at=_UNKNOWN_AT, kind=UNREADABLE,
                          reason=f"its stored data is not a valid audit event: {_why(exc)}")
    return event if event.id == row_id else event.model_copy(update={"id": row_id})


# Fields added after events were first sealed: left out of the digest while unset, so the
# hashes of events written before them (and of events that never use them) stay the same.
_LATER_FIELDS = ("original_fingerprint", "passkey")


def _digest(event: AuditEvent) -> str:
    unset = {name for name in _LATER_FIELDS if getattr(event, name) is None}
    body = event.model_dump(mode="json", exclude={"hash", *unset})
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def seal(event: AuditEvent, *, event_id: int, prev_hash: str) -> AuditEvent:
    """Give an event its place in the chain: id, the previous hash, its own hash."""
    placed = event.model_copy(update={"id": event_id, "prev_hash": prev_hash, "hash": ""})
    return placed.model_copy(update={"hash": _digest(placed)})


@dataclass(frozen=True)
class Verification:
    """The result of walking the chain."""

    ok: bool
    count: int
    head: str
    problem: str | None = None
    bad_event: int | None = None


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


async def _passkey_problem(store: TaskStore, event: AuditEvent) -> str | None:
    """A decision confirmed with a passkey: its stored assertion must verify again (a
    chain re-sealed after an edit would not notice an assertion swapped or altered)."""
    credential = str((event.passkey or {}).get("credential_id") or "")[:2000]
    problem = reverify(event, await store.passkey(credential) if credential else None)
    return f"event {event.id}'s passkey assertion fails: {problem}" if problem else None


async def verify(store: TaskStore, *, expect_head: tuple[int, str] | None = None,
                 batch: int = 20_000) -> Verification:
    """Re-walk the whole chain; name the first bad event (an event whose passkey
    assertion no longer verifies is one)."""
    prev, count, after = GENESIS, 0, 0
    seen_expected = expect_head is None
    while True:
        events = await store.audit_chain(after=after, limit=batch)
        if not events:
            break
        for event in events:
            problem = check_event(event, expected_id=count + 1, prev_hash=prev)
            if problem is None and event.passkey is not None:
                problem = await _passkey_problem(store, event)
            if problem:
                return Verification(False, count, prev, problem, event.id)
            prev, count = event.hash, count + 1
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
    return Verification(True, count, prev)
