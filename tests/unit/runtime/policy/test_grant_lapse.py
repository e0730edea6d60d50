"""Time-boxed grants on their own: when a grant stops covering, what people are told, and
that the audit field for edited approvals leaves older events' hashes as they were."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from signoff.runtime import audit
from signoff.runtime.models import Action, AuditEvent, RiskClass, Scope, TaskState
from signoff.runtime.policy.grants import covers, first_valid, grant_for, status

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ACTION = Action(tool="send_email", args={"to": ["john@example.com"]}, risk=RiskClass.SEND,
                capability="email.send", targets=("john@example.com",), fingerprint="fp")


def test_a_grant_covers_until_the_instant_it_lapses() -> None:
    """"for": 30m: it covers a microsecond before, not at, the lapse (Clock time, given)."""
    grant = grant_for(ACTION, Scope.ALWAYS, policy_id="nightly", task_id="t-1",
                      actor="web:admin", now=NOW, lasts=timedelta(minutes=30))
    end = NOW + timedelta(minutes=30)
    assert grant.expires_at == end
    assert covers(grant, task_id="t-2", now=end - timedelta(microseconds=1))
    assert not covers(grant, task_id="t-2", now=end)
    assert first_valid([grant], task_id="t-2", now=end) is None
    assert status(grant, TaskState.COMPLETED, end) == "lapsed"
    assert status(grant, TaskState.COMPLETED, NOW) == "live"


def test_a_grant_without_a_time_box_never_lapses() -> None:
    """No ``lasts``: no end (a session grant still ends with its task, as before)."""
    grant = grant_for(ACTION, Scope.SESSION, policy_id="t-1", task_id="t-1",
                      actor="web:admin", now=NOW)
    assert grant.expires_at is None
    assert covers(grant, task_id="t-1", now=NOW + timedelta(days=3650))
    assert status(grant, TaskState.COMPLETED, NOW) == "ended"


def test_events_sealed_without_original_fingerprint_still_verify() -> None:
    """A row written before the field existed (no key at all) checks out, and an edited
    decision's original_fingerprint is covered by its hash."""
    old = audit.seal(AuditEvent(kind="decision", tool="send_email", at=NOW), event_id=1,
                     prev_hash=audit.GENESIS)
    stored = audit.from_row(1, old.model_dump_json(exclude={"original_fingerprint"}))
    assert audit.check_event(stored, expected_id=1, prev_hash=audit.GENESIS) is None

    edited = audit.seal(AuditEvent(kind="decision", fingerprint="new", at=NOW,
                                   original_fingerprint="asked"), event_id=2,
                        prev_hash=old.hash)
    forged = edited.model_copy(update={"original_fingerprint": "other"})
    assert audit.check_event(edited, expected_id=2, prev_hash=old.hash) is None
    assert audit.check_event(forged, expected_id=2, prev_hash=old.hash) is not None
