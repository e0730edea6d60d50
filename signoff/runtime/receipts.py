"""Receipts: one decision, shown to someone who has no access to the database.

A receipt is the audit event that recorded the decision, exactly as it was sealed (the
action's tool, targets, risk and fingerprint; the decision, scope, who, when, through
which surface; its place in the chain: id, previous hash, hash; and whatever else the
event holds, such as a passkey assertion), with the node's signature over its hash and
the signing key's id::

    {"receipt": "signoff.receipt/1", "event": {...}, "kid": "...", "sig": "...",
     "key": {"kid": "...", "x": "...", ...}}

Checking one needs no database: recompute the hash from ``event`` (`audit.digest_of`,
the rule the chain itself uses), then check ``sig`` with a public key the checker trusts
(from ``GET /.well-known/signoff-keys``, `signoff keys`, or kept from earlier). The
``key`` inside is only a convenience: a verifier is given the key to trust.

An ID is an audit event id (a number, as `signoff audit` lists it) or an approval id: an
approval's receipt is its latest deciding event (approved, denied, expired, released,
undone, withdrawn, or settled by the policy at once).

The event pins the action's args without showing them (``args_digest``, an HMAC under the
request's own key: `audit.commit_args`). A receipt made with ``reveal`` also carries
``"reveal": {"args", "key"}``, outside the signed event: whoever is given it can check that
those args are the ones approved; without it, the receipt discloses no content.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any

from signoff.errors import BadArguments
from signoff.runtime import audit as chain
from signoff.runtime.bounds import OutOfBounds, parse_json
from signoff.runtime.models import AuditEvent, JsonDict
from signoff.runtime.signing import PublicKey, check_signature
from signoff.runtime.store.port import TaskStore

FORMAT = "signoff.receipt/1"
# The event kinds that settle a request; an "evaluation" settles one unless it asked.
DECIDING = frozenset({"decision", "expired", "released", "undo", "withdrawn"})
_SCAN = 5_000  # events read per step while looking for an approval's events


def deciding(event: AuditEvent) -> bool:
    """Whether an event records a decision (a person's, a timeout's or the policy's)."""
    if event.kind == "evaluation":
        return event.decision not in (None, "ASK_USER")
    return event.kind in DECIDING


def receipt_of(event: AuditEvent, key: PublicKey | None) -> JsonDict:
    """The receipt of a sealed event (``key``: the published key that signed it)."""
    return {"receipt": FORMAT, "event": event.model_dump(mode="json", exclude={"kid", "sig"}),
            "kid": event.kid, "sig": event.sig, "key": key.public() if key else None}


async def find_event(store: TaskStore, ident: str) -> AuditEvent:
    """The event an ID names (see the module docstring); BadArguments when there is none."""
    text = ident.strip()
    if text.isdigit():
        found = await store.audit_chain(after=int(text) - 1, limit=1)
        if not found or found[0].id != int(text):
            raise BadArguments(f"no audit event {text}")
        return found[0]
    approval = await store.get_approval(text)
    if approval is None:
        raise BadArguments(f"no approval {text!r} (an ID is an approval id or an audit "
                           "event number)")
    last = None
    async for event in _events(store, approval.task_id):
        if event.approval_id == text and deciding(event):
            last = event
    if last is None:
        raise BadArguments(f"approval {text} has no decision yet ({approval.status.value})")
    return last


async def _events(store: TaskStore, task_id: str | None) -> Any:
    """Every event of a task (or, for a request without one, of the whole log)."""
    if task_id is not None:
        cursor: str | None = None
        while True:
            page = await store.audit_events(task_id=task_id, limit=500, cursor=cursor)
            for item in page.items:
                yield item
            if not page.next_cursor:
                return
            cursor = page.next_cursor
    after = 0
    while events := await store.audit_chain(after=after, limit=_SCAN):
        for event in events:
            yield event
        after = events[-1].id


async def receipt(store: TaskStore, ident: str, *, reveal: bool = False) -> JsonDict:
    """The receipt of the decision an ID names (``reveal``: with the args it approved
    and the key that proves them)."""
    event = await find_event(store, ident)
    if event.sig is None:
        raise BadArguments(f"audit event {event.id} was not signed (it was written before "
                           "signing began): it has no receipt")
    keys = {k.kid: k for k in await store.signing_keys()}
    body = receipt_of(event, keys.get(event.kid or ""))
    if reveal:
        body["reveal"] = await _revealed(store, event)
    return body


async def _revealed(store: TaskStore, event: AuditEvent) -> JsonDict:
    """The args ``event`` commits to, and its request's key; BadArguments when it
    commits to none (an event of no request, or one written before 0.3)."""
    approval = (await store.get_approval(event.approval_id)
                if event.approval_id and event.args_digest else None)
    if approval is None or not approval.args_key:
        raise BadArguments(f"audit event {event.id} pins no args (it is not about a request "
                           "made since 0.3): nothing to reveal")
    key = approval.args_key
    # An approval holds the action as asked and, once edited, as approved: the event
    # commits to the one it was about.
    for action in (approval.action, approval.original_action):
        if action is not None and chain.commit_args(key, action.args) == event.args_digest:
            return {"args": action.args, "key": key}
    raise BadArguments(f"audit event {event.id}: the stored request no longer holds the "
                       "args it approved (changed since?)")


@dataclass(frozen=True)
class Checked:
    """What checking a receipt found: ``problem`` is None when it is genuine."""

    problem: str | None
    event: JsonDict
    revealed: bool = False  # the receipt's "reveal" args are the ones the event pins

    def summary(self) -> str:
        """One line about the decision the receipt proves."""
        e = self.event
        what = " ".join(str(p) for p in (e.get("decision"), e.get("scope")) if p)
        line = (f"event {e.get('id')} ({e.get('kind')}{': ' + what if what else ''}) "
                f"by {e.get('actor') or '-'} at {e.get('at')}, {e.get('tool') or '-'}")
        return line + ("; the args under \"reveal\" are the ones it was about"
                       if self.revealed else "")


def check(text: str | bytes, public_key: str) -> Checked:
    """Check a receipt's text against a trusted public key (base64url), offline."""
    try:
        body = parse_json(text, "receipt")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return Checked(f"the receipt is not JSON: {exc}", {})
    except OutOfBounds as exc:
        return Checked(str(exc), {})
    if not isinstance(body, dict) or body.get("receipt") != FORMAT:
        return Checked(f"not a signoff receipt (no \"receipt\": \"{FORMAT}\")", {})
    event, kid, sig = body.get("event"), body.get("kid"), body.get("sig")
    if not isinstance(event, dict) or not isinstance(kid, str) or not isinstance(sig, str):
        return Checked("the receipt lacks its event, kid or sig", {})
    try:
        digest = chain.digest_of(event)
    except ValueError:  # NaN, Infinity or a lone surrogate: no sealed event holds one
        return Checked("the event holds a value no audit event can (it was changed)", event)
    if digest != event.get("hash"):
        return Checked("the event does not match its hash (it was changed)", event)
    why = check_signature(public_key, kid, str(event["hash"]), sig)
    if why:
        return Checked(f"the signature is not valid: {why}", event)
    if "reveal" not in body:
        return Checked(None, event)
    return _check_reveal(body["reveal"], event)


def _check_reveal(reveal: Any, event: JsonDict) -> Checked:
    """A genuine event's receipt whose ``reveal`` must hold the args it pins."""
    pinned = event.get("args_digest")
    if not isinstance(pinned, str):
        return Checked("the receipt reveals args, but its event pins none", event)
    if (not isinstance(reveal, dict) or not isinstance(reveal.get("args"), dict)
            or not isinstance(reveal.get("key"), str)):
        return Checked("\"reveal\" must hold \"args\" (an object) and \"key\" (a string)",
                       event)
    try:
        shown = chain.commit_args(reveal["key"], reveal["args"])
    except (ValueError, TypeError):  # a key that is not base64url, args JSON cannot spell
        return Checked("\"reveal\" holds a key or args no request could have", event)
    if not hmac.compare_digest(shown, pinned):
        return Checked("the args under \"reveal\" are not the ones the event pins", event)
    return Checked(None, event, revealed=True)
