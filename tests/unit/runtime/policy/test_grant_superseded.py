"""What the grant listing says of a schedule's grants agrees with the rule: `status` says
``superseded`` exactly when `covers` would not let the grant cover a later run of the
schedule as it is configured now."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from signoff.runtime.models import Action, Grant, RiskClass, Scope, TaskState
from signoff.runtime.policy.grants import covers, grant_for, status

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ACTION = Action(tool="send_email", args={"to": ["john@example.com"]}, risk=RiskClass.SEND,
                capability="email.send", targets=("john@example.com",), fingerprint="fp")
OLD, NEW = "d" * 64, "e" * 64  # two definitions of "nightly"


def scheduled(scope: Scope, definition: str | None) -> Grant:
    """A grant given in run t-1 of "nightly", made under ``definition``."""
    return grant_for(ACTION, scope, policy_id="nightly", task_id="t-1", actor="web:admin",
                     now=NOW, schedule_definition=definition)


@pytest.mark.parametrize(("made_under", "configured", "said"), [
    (OLD, {"nightly": OLD}, "live"),  # defined as before
    (OLD, {"nightly": NEW}, "superseded"),  # goal or steps edited
    (OLD, {"other": OLD}, "superseded"),  # "nightly" removed
    (None, {"nightly": NEW}, "superseded"),  # given before grants carried a definition
    (None, {}, "superseded"),  # ... and its schedule removed too
])
def test_a_schedules_always_is_live_only_while_it_covers_the_next_run(
        made_under: str | None, configured: dict[str, str], said: str) -> None:
    """The listed status is live exactly when the grant covers the next run of the
    schedule as configured (a run the scheduler fires carries its definition)."""
    grant = scheduled(Scope.ALWAYS, made_under)
    assert status(grant, TaskState.COMPLETED, NOW, definitions=configured) == said
    next_run = configured.get("nightly")
    covered = next_run is not None and covers(grant, task_id="t-2", now=NOW,
                                              definition=next_run)
    assert covered is (said == "live")


def test_other_grants_are_never_superseded() -> None:
    """A session grant (it covers its own run only), a task's own Always (no schedule)
    and an outside request's grant keep their status whatever the schedules are; and
    without the schedules known (None) nothing is said to be superseded."""
    session = scheduled(Scope.SESSION, OLD)
    assert status(session, TaskState.IN_PROGRESS, NOW, definitions={}) == "live"
    assert status(session, TaskState.COMPLETED, NOW, definitions={}) == "ended"
    own = grant_for(ACTION, Scope.ALWAYS, policy_id="t-9", task_id="t-9", actor="web:admin",
                    now=NOW)
    assert status(own, TaskState.COMPLETED, NOW, definitions={}) == "live"
    outside = grant_for(ACTION, Scope.ALWAYS, policy_id="nightly", task_id=None,
                        actor="web:admin", now=NOW)
    assert status(outside, None, NOW, definitions={}) == "live"
    assert status(scheduled(Scope.ALWAYS, OLD), TaskState.COMPLETED, NOW) == "live"


def test_revoked_and_used_say_so_first() -> None:
    """A revoked superseded grant lists as revoked (what a person did last)."""
    grant = scheduled(Scope.ALWAYS, OLD).model_copy(update={"revoked_at": NOW})
    assert status(grant, TaskState.COMPLETED, NOW, definitions={"nightly": NEW}) == "revoked"
