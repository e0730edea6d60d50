"""[policy.quorum] and approvals.hold: the lookup (signoff/runtime/policy/quorum.py) and
what the config accepts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from signoff.config.settings import Settings
from signoff.runtime.models import Action, RiskClass, Scope
from signoff.runtime.policy.quorum import ApprovalRules, narrowest

DELETE = Action(tool="delete_file", risk=RiskClass.DESTRUCTIVE, capability="fs.delete")
EMAIL = Action(tool="send_email", risk=RiskClass.SEND, capability="email.send")


def test_a_quorum_by_capability_or_risk_class_and_the_stricter_wins() -> None:
    """A capability entry, a risk class entry, both (the larger), neither (1)."""
    rules = ApprovalRules(quorum={"fs.delete": 2, "DESTRUCTIVE": 3, "SEND": 2})
    assert rules.needed(DELETE) == 3
    assert rules.needed(EMAIL) == 2
    assert ApprovalRules(quorum={"fs.delete": 2}).needed(DELETE) == 2
    assert ApprovalRules().needed(DELETE) == 1


def test_the_hold_is_per_risk_class_and_zero_by_default() -> None:
    """approvals.hold gives the window of the action's risk class."""
    rules = ApprovalRules(hold={RiskClass.SEND: timedelta(seconds=30)})
    assert rules.hold_for(EMAIL) == timedelta(seconds=30)
    assert rules.hold_for(DELETE) == timedelta(0)


def test_a_quorum_grants_the_narrowest_scope() -> None:
    """Once beats session beats always."""
    assert narrowest([Scope.ALWAYS, Scope.SESSION]) is Scope.SESSION
    assert narrowest([Scope.ALWAYS, Scope.ONCE, Scope.SESSION]) is Scope.ONCE


def test_the_config_reads_quorum_and_hold() -> None:
    """Risk classes in any case, capabilities as written; durations like '30s'."""
    settings = Settings.model_validate({
        "policy": {"quorum": {"fs.delete": 2, "destructive": 3}},
        "approvals": {"hold": {"SEND": "30s", "DESTRUCTIVE": "0s"}}})
    assert settings.policy.quorum == {"fs.delete": 2, "DESTRUCTIVE": 3}
    assert settings.approvals.hold == {RiskClass.SEND: timedelta(seconds=30),
                                       RiskClass.DESTRUCTIVE: timedelta(0)}


@pytest.mark.parametrize(("section", "body", "words"), [
    ("policy", {"quorum": {"fs.delete": 0}}, "greater than or equal to 1"),
    ("policy", {"quorum": {"fs.delete": 21}}, "less than or equal to 20"),
    ("approvals", {"hold": {"SEND": "soon"}}, "invalid duration"),
    ("approvals", {"hold": {"LOUD": "30s"}}, "LOUD"),
    ("approvals", {"hold": {"SEND": "2h"}}, "at most '1h'"),
])
def test_bad_quorum_or_hold_is_a_clear_error(section: str, body: dict[str, object],
                                            words: str) -> None:
    """Out-of-range counts, bad durations and unknown risk classes name the problem."""
    with pytest.raises(ValidationError, match=words):
        Settings.model_validate({section: body})
