"""A decided card's outcome line names people, not accounts: a withdrawn request too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from signoff.bot.cards import outcome_line
from signoff.runtime.models import Action, Approval, ApprovalStatus, Scope
from signoff.runtime.people import People

NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
PEOPLE = People.of([("Bob", ["web:bob", "slack:U2"])])


def decided(status: ApprovalStatus, by: str | None, scope: Scope | None = None) -> Approval:
    """An outside request decided at NOW."""
    return Approval(id="a-1", task_id=None, action=Action(tool="send_email", args={}),
                    requested_at=NOW, expires_at=NOW + timedelta(hours=1), status=status,
                    scope=scope, decided_by=by, decided_at=NOW)


def test_withdrawn_names_the_person_who_withdrew() -> None:
    """"Withdrawn by Bob", the [[people]] name of web:bob; nobody named: the requester."""
    line = outcome_line(decided(ApprovalStatus.WITHDRAWN, "web:bob"), PEOPLE)
    assert line == "Withdrawn by Bob at 12:00 UTC"
    unnamed = outcome_line(decided(ApprovalStatus.WITHDRAWN, None), PEOPLE)
    assert unnamed == "Withdrawn by the requester at 12:00 UTC"


def test_an_approval_names_the_person_too() -> None:
    """Approved once by slack:U2 reads as Bob."""
    line = outcome_line(decided(ApprovalStatus.APPROVED, "slack:U2", Scope.ONCE), PEOPLE)
    assert line is not None and line.startswith("Approved once by Bob")
