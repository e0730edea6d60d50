"""[approvals] grant_ttl and step_up: their defaults, and clear errors naming the key."""

from __future__ import annotations

from datetime import timedelta

from signoff.config.settings import Settings
from signoff.runtime.models import RiskClass
from tests.unit.config.test_config import WriteConfig, config_error, write_config  # noqa: F401


def test_grant_ttl_is_thirty_days_and_step_up_empty_by_default() -> None:
    """An always answer lasts 30 days unless configured; nothing steps up unless listed."""
    approvals = Settings.default().approvals
    assert approvals.grant_ttl == timedelta(days=30) and approvals.step_up == []
    chosen = Settings.model_validate(
        {"approvals": {"grant_ttl": "12h", "step_up": ["destructive"]}}).approvals
    assert chosen.grant_ttl == timedelta(hours=12)
    assert chosen.step_up == [RiskClass.DESTRUCTIVE]


def test_a_zero_grant_ttl_or_an_unknown_risk_class_is_refused_by_name(
        write_config: WriteConfig) -> None:  # noqa: F811
    """"0s" would make every always grant lapse at once; "NUKE" is no risk class."""
    zero = config_error(write_config('[approvals]\ngrant_ttl = "0s"\n'))
    assert zero == "config.toml: approvals.grant_ttl: must be longer than 0s"
    unknown = config_error(write_config('[approvals]\nstep_up = ["NUKE"]\n'))
    assert unknown.startswith("config.toml: approvals.step_up[0]: "), unknown
