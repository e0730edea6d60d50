"""`Schedule.definition`: what a schedule does (name, goal, steps) and nothing about when."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from signoff.runtime.policy.unattended import CronMode
from signoff.runtime.schedule.spec import Schedule, ScheduleStep

REPORT = ScheduleStep("send_email", {"to": "team@example.com", "body": "All green."})
NIGHTLY = Schedule(name="nightly", goal="send the report", zone=ZoneInfo("UTC"),
                   misfire_grace=timedelta(minutes=5), cron="0 3 * * *", steps=(REPORT,))


@pytest.mark.parametrize("change", [
    {"cron": "30 4 * * 1-5"}, {"cron": None, "every": timedelta(hours=1)},
    {"zone": ZoneInfo("Europe/Berlin")}, {"misfire_grace": timedelta(hours=1)},
    {"jitter": timedelta(seconds=30)}, {"timeout": timedelta(hours=2)}, {"enabled": False},
    {"prohibit": ("DESTRUCTIVE",)}, {"cron_mode": CronMode.APPROVE},
])
def test_when_and_guards_are_not_part_of_the_definition(change: dict[str, object]) -> None:
    """Moving, pausing or guarding a schedule keeps its definition (and its grants)."""
    assert replace(NIGHTLY, **change).definition == NIGHTLY.definition  # type: ignore[arg-type]


@pytest.mark.parametrize("change", [
    {"goal": "send the report and the salaries"},
    {"steps": (ScheduleStep("send_email", {"to": "team@example.com", "body": "Bye."}),)},
    {"steps": (REPORT, REPORT)}, {"steps": None}, {"name": "weekly"},
])
def test_what_it_does_is_the_definition(change: dict[str, object]) -> None:
    """Another goal, other steps (a step's content too) or another name: another definition."""
    assert replace(NIGHTLY, **change).definition != NIGHTLY.definition  # type: ignore[arg-type]


def test_the_definition_is_the_same_in_every_process() -> None:
    """A digest of canonical JSON: the same entry read again (a restart) gives the same one,
    whatever the order of a step's arguments."""
    again = replace(NIGHTLY, steps=(ScheduleStep("send_email", {"body": "All green.",
                                                                "to": "team@example.com"}),))
    assert again.definition == NIGHTLY.definition
    assert len(NIGHTLY.definition) == 64
