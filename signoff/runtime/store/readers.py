"""Reading stored records back, totally: one bad row never stops a loop.

A row whose JSON cannot be parsed or validated (written before inputs were bounded —
see `signoff.runtime.bounds` — or damaged by hand) is read as a stand-in instead of
raising through the worker, the expiry sweep, the pending list or a restart:

- a task reads as FAILED with ``result.reason`` and ``unreadable`` saying why; the engine
  sets it aside (fails it for good, through its own save) when it claims or recovers it;
- a request reads as EXPIRED with the reason; listings of live work skip it, a decision
  on it is refused as on any expired request, and the sweep expires it for good when due;
- a grant is left out (`read_grant` gives None): it never covers an action, and the
  grant listings and the policy's look-ups go on with the others;
- an outbox job's payload that is not a JSON object comes back empty with the reason
  (`read_payload`): the dispatcher gives that one job up instead of failing every round,
  which held back every card of every surface behind it;
- a message of an agent's transcript reads as a ``system`` message saying it cannot be
  read, ``meta["unreadable"]`` set: the console and the transcript API show it in its
  place, and the agent loop fails its task rather than send the model a gap.

What the row held is kept as it was (nothing is rewritten until the engine sets the task
aside). Each unreadable record is logged once per process, with its id and the parser's
words, never its content.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from signoff.runtime.models import (
    Action,
    Approval,
    ApprovalStatus,
    Grant,
    JsonDict,
    Task,
    TaskState,
)
from signoff.runtime.transcript import TranscriptEntry

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # a stand-in's time when the row has none to give
UNREADABLE_TOOL = "(unreadable)"
_TASK_KEEP = ("goal", "created_at", "updated_at", "submitted_by", "schedule", "fire_time")
_APPROVAL_KEEP = ("requested_at", "policy_id", "requester", "submitted_by", "goal",
                  "idempotency_key", "request_digest", "step")
_logged: set[tuple[str, str]] = set()
_lock = threading.Lock()
R = TypeVar("R", Task, Approval)


def read_task(data: str | bytes, task_id: str) -> Task:
    """The stored task, or its stand-in (FAILED, `Task.unreadable` set)."""
    try:
        return Task.model_validate_json(data)
    except (ValidationError, ValueError, RecursionError) as exc:
        reason = _unreadable("task", task_id, exc)
    kept = _salvage(data, _TASK_KEEP)
    base: dict[str, Any] = {"id": task_id, "goal": "(unreadable task)",
                            "state": TaskState.FAILED, "result": {"reason": reason},
                            "unreadable": reason, "created_at": EPOCH, "updated_at": EPOCH}
    try:
        return Task.model_validate({**base, **kept})
    except ValidationError:  # what was salvaged is wrong too
        return Task.model_validate(base)


def read_approval(data: str | bytes, approval_id: str, *, task_id: str | None,
                  expires_at: datetime | None) -> Approval:
    """The stored request, or its stand-in (EXPIRED with the reason, `Approval.unreadable`
    set). ``task_id`` and ``expires_at`` come from the row's columns."""
    try:
        return Approval.model_validate_json(data)
    except (ValidationError, ValueError, RecursionError) as exc:
        reason = _unreadable("request", approval_id, exc)
    kept = _salvage(data, _APPROVAL_KEEP)
    when = expires_at or EPOCH
    base: dict[str, Any] = {"id": approval_id, "task_id": task_id or None,
                            "status": ApprovalStatus.EXPIRED,
                            "action": Action(tool=UNREADABLE_TOOL), "expires_at": when,
                            "requested_at": when, "reason": reason, "unreadable": reason}
    try:
        return Approval.model_validate({**base, **kept})
    except ValidationError:
        return Approval.model_validate(base)


def read_grant(data: str | bytes, grant_id: str) -> Grant | None:
    """The stored grant, or None when it cannot be read (it then grants nothing)."""
    try:
        return Grant.model_validate_json(data)
    except (ValidationError, ValueError, RecursionError) as exc:
        _unreadable("grant", grant_id, exc)
        return None


def read_payload(data: str | bytes, item_id: int) -> tuple[JsonDict, str | None]:
    """An outbox job's payload and None, or ``({}, reason)`` when it is not a JSON object."""
    try:
        found = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return {}, _unreadable("outbox job", str(item_id), exc)
    if not isinstance(found, dict):
        return {}, _unreadable("outbox job", str(item_id),
                               ValueError(f"a JSON {type(found).__name__}, not an object"))
    return found, None


def read_entry(data: str | bytes, task_id: str, seq: int) -> TranscriptEntry:
    """The stored transcript message, or its stand-in (``meta["unreadable"]`` set)."""
    try:
        return TranscriptEntry.model_validate_json(data)
    except (ValidationError, ValueError, RecursionError) as exc:
        reason = _unreadable("transcript message", f"{task_id}#{seq}", exc)
    return TranscriptEntry(task_id=task_id, seq=seq, role="system", content=f"({reason})",
                           meta={"unreadable": reason})


def readable(records: Iterable[R]) -> list[R]:
    """``records`` without stand-ins (for listings of live work)."""
    return [r for r in records if r.unreadable is None]


def _unreadable(kind: str, record_id: str, exc: BaseException) -> str:
    """The reason a record cannot be read, logged the first time it is seen."""
    reason = f"the stored {kind} cannot be read ({_words(exc)})"
    with _lock:
        first = (kind, record_id) not in _logged
        _logged.add((kind, record_id))
    if first:
        log.error("stored_record_unreadable",
                  extra={"kind": kind, "record_id": record_id, "reason": reason})
    return reason


def _words(exc: BaseException) -> str:
    """The parser's words, without the input (it may hold message bodies)."""
    if isinstance(exc, ValidationError):
        first = exc.errors(include_input=False, include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    if isinstance(exc, RecursionError):
        return "nested too deep"
    return str(exc)[:200]


def _salvage(data: str | bytes, keys: tuple[str, ...]) -> dict[str, Any]:
    """The plain top-level values of ``keys`` that can still be had from the row."""
    try:
        found = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: found[k] for k in keys if isinstance(found.get(k), str | int)
            and not isinstance(found.get(k), bool)}
