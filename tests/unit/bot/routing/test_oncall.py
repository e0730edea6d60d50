"""On-call rotations: handoffs (DST-correct), overrides, first line and escalation chains."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from signoff.bot.routing.oncall import (
    OnCallRouter,
    Override,
    Rotation,
    current_approvers,
    escalation_chain,
    escalation_targets,
    first_line,
    next_escalation,
    shift_at,
    who_is_on_call,
)
from signoff.config.settings import OncallOverride
from signoff.config.settings import Rotation as RotationEntry
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import RunMode, Task

BERLIN = ZoneInfo("Europe/Berlin")
A, B, C = "slack:UA", "slack:UB", "slack:UC"


def rot(name: str = "primary", members: tuple[str, ...] = (A, B, C), **kw: Any) -> Rotation:
    """A rotation from config-shaped keyword arguments, converted as the daemon does."""
    return RotationEntry.model_validate({"name": name, "members": list(members),
                                         **kw}).to_runtime()


def over(who: str, start: datetime, until: datetime, rotation: str | None = None) -> Override:
    """An override, from config as the daemon reads it."""
    return OncallOverride.model_validate({"who": who, "from": start, "until": until,
                                          "rotation": rotation}).to_runtime()


def berlin(*args: int) -> datetime:
    """A Berlin wall time."""
    return datetime(*args, tzinfo=BERLIN)  # type: ignore[misc]


def test_weekly_handoff_on_monday_morning() -> None:
    """A weekly rotation hands over on Monday at 09:00 local, not a minute earlier."""
    weekly = rot(period="1w", handoff="mon 09:00", timezone="Europe/Berlin",
                 start=date(2026, 11, 2))  # a Monday: UA from then, UB from 11-09, ...
    before = shift_at(weekly, [], berlin(2026, 11, 30, 8, 59))
    after = shift_at(weekly, [], berlin(2026, 11, 30, 9, 0))
    assert (before.member, after.member) == (A, B)  # weeks 3 and 4 after 11-02
    assert after.since == berlin(2026, 11, 30, 9, 0).astimezone(UTC)
    assert after.until == berlin(2026, 12, 7, 9, 0).astimezone(UTC)
    assert before.until == after.since


def test_members_take_turns_in_order() -> None:
    """Week n after the first handoff belongs to member n mod len(members)."""
    weekly = rot(period="1w", handoff="mon 09:00", start=date(2026, 11, 2))
    members = [shift_at(weekly, [], datetime(2026, 11, 2, 12, tzinfo=UTC) + timedelta(weeks=n)
                        ).member for n in range(5)]
    assert members == [A, B, C, A, B]


def test_handoff_weekday_is_aligned_from_the_start_date() -> None:
    """The first handoff is the first handoff weekday on or after `start`."""
    weekly = rot(period="1w", handoff="wed 10:00", start=date(2026, 11, 2))  # a Monday
    first = shift_at(weekly, [], datetime(2026, 11, 4, 10, tzinfo=UTC))
    assert first.member == A
    assert first.since == datetime(2026, 11, 4, 10, tzinfo=UTC)
    assert shift_at(weekly, [], datetime(2026, 11, 4, 9, 59, tzinfo=UTC)).member == C


@pytest.mark.parametrize(("zone", "day"), [
    ("Europe/Berlin", date(2026, 3, 29)), ("Europe/Berlin", date(2026, 10, 25)),
    ("America/New_York", date(2026, 3, 8)), ("America/New_York", date(2026, 11, 1)),
])
def test_daily_handoff_stays_at_nine_local_across_dst(zone: str, day: date) -> None:
    """A 09:00 handoff stays 09:00 local; the shift over the change is 23 or 25 hours."""
    tz = ZoneInfo(zone)
    daily = rot(period="1d", handoff="09:00", timezone=zone)
    shifts = [shift_at(daily, [], datetime.combine(day + timedelta(days=d),
                                                   datetime.min.time(), tzinfo=tz)
                       + timedelta(hours=12)) for d in range(-2, 3)]
    assert [s.since.astimezone(tz).strftime("%H:%M") for s in shifts] == ["09:00"] * 5
    assert all(a.until == b.since for a, b in itertools.pairwise(shifts))
    lengths = {(s.until - s.since) for s in shifts}
    assert lengths == {timedelta(hours=24), timedelta(hours=23 if day.month == 3 else 25)}


def test_weekly_handoff_across_dst_keeps_local_time() -> None:
    """The weekly shift spanning the October change is 7 days + 1 hour of real time."""
    weekly = rot(period="1w", handoff="mon 09:00", timezone="Europe/Berlin")
    shift = shift_at(weekly, [], berlin(2026, 10, 25, 12, 0))
    assert shift.since.astimezone(BERLIN).strftime("%a %H:%M") == "Mon 09:00"
    assert shift.until.astimezone(BERLIN).strftime("%a %H:%M") == "Mon 09:00"
    assert shift.until - shift.since == timedelta(weeks=1, hours=1)


def test_sub_day_periods_count_elapsed_time() -> None:
    """A 12h rotation hands over every 12 hours of real time."""
    halves = rot(period="12h", handoff="08:00", members=(A, B))
    day = shift_at(halves, [], datetime(2026, 11, 30, 9, tzinfo=UTC))
    night = shift_at(halves, [], datetime(2026, 11, 30, 21, tzinfo=UTC))
    assert day.since == datetime(2026, 11, 30, 8, tzinfo=UTC)
    assert night.since == datetime(2026, 11, 30, 20, tzinfo=UTC)
    assert day.member != night.member


def test_before_the_start_the_rotation_runs_backwards() -> None:
    """`start` fixes the phase only: earlier times still have someone on call."""
    weekly = rot(period="1w", start=date(2026, 11, 2))
    shift = shift_at(weekly, [], datetime(2026, 10, 28, tzinfo=UTC))
    assert shift.member == C
    assert shift.until == datetime(2026, 11, 2, 9, tzinfo=UTC)


def test_override_replaces_the_member_while_active() -> None:
    """An override puts someone else on call from `from` until `until`, then it ends."""
    weekly = rot(period="1w", start=date(2026, 11, 30))
    t0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
    cover = over("slack:UZ", t0, t0 + timedelta(hours=6))
    assert shift_at(weekly, [cover], t0 - timedelta(minutes=1)).member == A
    during = shift_at(weekly, [cover], t0 + timedelta(hours=1))
    assert (during.member, during.override, during.until) == ("slack:UZ", True, cover.until)
    assert shift_at(weekly, [cover], cover.until).member == A


def test_regular_shift_ends_when_an_override_starts() -> None:
    """The shift before an override says it ends when the override begins."""
    weekly = rot(period="1w", start=date(2026, 11, 30))
    t0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
    cover = over("slack:UZ", t0, t0 + timedelta(hours=6))
    assert shift_at(weekly, [cover], t0 - timedelta(hours=1)).until == t0


def test_override_for_one_rotation_leaves_the_others() -> None:
    """An override naming a rotation changes only that rotation."""
    rotations = [rot("primary", (A,)), rot("db", (B,))]
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    shifts = who_is_on_call(rotations, [over(C, t0, t0 + timedelta(days=1), "db")],
                            t0 + timedelta(hours=1))
    assert [(s.rotation, s.member) for s in shifts] == [("primary", A), ("db", C)]


def test_latest_started_override_wins() -> None:
    """Of two active overrides the one that started last applies."""
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    overrides = [over(B, t0, t0 + timedelta(days=2)), over(C, t0 + timedelta(hours=5),
                                                          t0 + timedelta(hours=8))]
    weekly = rot(members=(A,))
    assert shift_at(weekly, overrides, t0 + timedelta(hours=6)).member == C
    assert shift_at(weekly, overrides, t0 + timedelta(hours=9)).member == B


# -- first line and escalation ------------------------------------------------------------


def chain_config(**primary: Any) -> list[Rotation]:
    """primary → secondary → managers."""
    return [rot("primary", (A,), escalate_after="10m", next="secondary", **primary),
            rot("secondary", (B,), escalate_after="20m", next="managers"),
            rot("managers", (C,))]


def test_first_line_and_current_approvers() -> None:
    """Only rotations nobody escalates to are first line; their members approve."""
    rotations = chain_config()
    assert [r.name for r in first_line(rotations)] == ["primary"]
    assert current_approvers(rotations, [], datetime(2026, 12, 1, tzinfo=UTC)) == {A}


def test_escalation_targets_follow_next() -> None:
    """Level 0 is the rotation itself, then each `next`, then nothing."""
    rotations = chain_config()
    at = datetime(2026, 12, 1, tzinfo=UTC)
    found = [escalation_targets(rotations, [], "primary", level, at) for level in range(4)]
    assert [(r.name, m) for r, m in filter(None, found)] == [
        ("primary", [A]), ("secondary", [B]), ("managers", [C])]
    assert found[3] is None


def test_next_escalation_uses_the_current_levels_delay() -> None:
    """Level 0 → 1 after primary's 10m, 1 → 2 after secondary's 20m, then stop."""
    rotations = chain_config()
    at = datetime(2026, 12, 1, tzinfo=UTC)
    first = next_escalation(rotations, [], 0, at)
    second = next_escalation(rotations, [], 1, at)
    assert first is not None and second is not None
    assert (first.level, first.after, first.rotations, first.members) == (
        1, timedelta(minutes=10), ("secondary",), (B,))
    assert (second.level, second.after, second.members) == (2, timedelta(minutes=20), (C,))
    assert next_escalation(rotations, [], 2, at) is None


def test_escalation_targets_the_override_of_the_next_rotation() -> None:
    """Escalation pages whoever is on call in the next rotation, overrides included."""
    rotations = chain_config()
    at = datetime(2026, 12, 1, tzinfo=UTC)
    cover = over("slack:UZ", at - timedelta(hours=1), at + timedelta(hours=1), "secondary")
    step = next_escalation(rotations, [cover], 0, at)
    assert step is not None and step.members == ("slack:UZ",)


def test_rotation_without_escalate_after_never_escalates() -> None:
    """No `escalate_after`, no escalation, even with a `next`."""
    rotations = [rot("primary", (A,), next="secondary"), rot("secondary", (B,))]
    assert next_escalation(rotations, [], 0, datetime(2026, 12, 1, tzinfo=UTC)) is None


@pytest.mark.parametrize(("limit", "expected"), [
    (0, ["a", "b"]), (1, ["a", "b", "a", "b"]), (2, ["a", "b", "a", "b", "a", "b"])])
def test_loops_are_bounded_by_repeat_limit(limit: int, expected: list[str]) -> None:
    """primary ⇄ secondary: each rotation is paged at most 1 + repeat_limit times."""
    rotations = [rot("a", (A,), escalate_after="5m", next="b", repeat_limit=limit),
                 rot("b", (B,), escalate_after="5m", next="a", repeat_limit=limit)]
    assert [r.name for r in escalation_chain(rotations, "a")] == expected


def test_all_rotations_in_a_loop_still_have_a_first_line() -> None:
    """When every rotation is someone's `next`, the first one is first line."""
    rotations = [rot("a", (A,), next="b"), rot("b", (B,), next="a")]
    assert [r.name for r in first_line(rotations)] == ["a"]


# -- the router the daemon shares ---------------------------------------------------------------


def test_router_follows_the_clock_across_a_handoff() -> None:
    """`current()` is recomputed from the Clock: a handoff changes it without a restart."""
    clock = FakeClock(berlin(2026, 11, 30, 8, 59))
    router = OnCallRouter(rotations=[rot(period="1d", handoff="09:00",
                                         timezone="Europe/Berlin")], clock=clock)
    before = router.current()
    clock.advance(timedelta(minutes=1))
    assert router.current() != before
    assert len(router.current()) == 1


def test_router_routes_only_scheduled_tasks() -> None:
    """Scheduled runs go to the schedule's approvers or whoever is on call; others to nobody."""
    clock = FakeClock(datetime(2026, 12, 1, tzinfo=UTC))
    router = OnCallRouter(rotations=chain_config(), clock=clock,
                          schedule_approvers={"payroll": ["slack:UP"]})
    nightly = Task(id="t1", goal="g", mode=RunMode.SCHEDULED, schedule="nightly")
    payroll = Task(id="t2", goal="g", mode=RunMode.SCHEDULED, schedule="payroll")
    interactive = Task(id="t3", goal="g")
    assert router.approvers_for(nightly) == [A]
    assert router.approvers_for(payroll) == ["slack:UP"]
    assert router.approvers_for(interactive) == []


def test_router_without_rotations_has_nobody() -> None:
    """No rotations configured: nobody is on call."""
    assert OnCallRouter(rotations=[], clock=FakeClock()).current() == set()


def test_router_describe_is_the_api_body() -> None:
    """`describe` lists the first-line approvers and every rotation's shift."""
    at = datetime(2026, 12, 1, tzinfo=UTC)
    body = OnCallRouter(rotations=chain_config(), clock=FakeClock(at)).describe()
    assert body["at"] == at.isoformat() and body["on_call"] == [A]
    first = body["rotations"][0]
    assert (first["rotation"], first["member"], first["escalates_to"], first["escalate_after"]
            ) == ("primary", A, "secondary", 600.0)
    assert body["rotations"][2]["escalates_to"] is None
