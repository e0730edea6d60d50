"""Crontab semantics on APScheduler triggers: weekdays, the day OR rule, DST, intervals."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.runtime.schedule.cron import (
    CrontabTrigger,
    crontab_weekdays,
    fire_times,
    interval_trigger,
    next_fire_times,
    previous_fire_time,
    schedule_trigger,
)

SUNDAY = date(2026, 11, 29)  # a known Sunday
WED = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def days(expr: str, count: int = 7, start: datetime = WED) -> list[str]:
    """Weekday names of the next fire times of ``expr`` in UTC."""
    return [t.strftime("%a") for t in next_fire_times(CrontabTrigger(expr), start, count)]


def test_known_sunday() -> None:
    """The fixture date really is a Sunday (Python's weekday 6)."""
    assert SUNDAY.weekday() == 6


@pytest.mark.parametrize("weekday", ["0", "7", "sun", "SUN"])
def test_zero_and_seven_are_sunday(weekday: str) -> None:
    """`0`, `7` and `sun` all fire on Sunday 2026-11-29 and only on Sundays."""
    fires = next_fire_times(CrontabTrigger(f"0 9 * * {weekday}"), WED, 3)
    assert fires[0] == datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    assert {f.date().weekday() for f in fires} == {6}


def test_apscheduler_from_crontab_trap_is_avoided() -> None:
    """APScheduler's own parser reads `0` as Monday; ours reads it as Sunday."""
    theirs = CronTrigger.from_crontab("0 9 * * 0", timezone="UTC").get_next_fire_time(None, WED)
    ours = CrontabTrigger("0 9 * * 0").get_next_fire_time(None, WED)
    assert theirs.strftime("%a") == "Mon"
    assert ours.strftime("%a") == "Sun"


def test_one_to_five_is_monday_to_friday() -> None:
    """`1-5` fires Monday to Friday, never on the weekend."""
    assert days("0 9 * * 1-5", 10) == ["Thu", "Fri", "Mon", "Tue", "Wed", "Thu", "Fri",
                                       "Mon", "Tue", "Wed"]
    assert days("0 9 * * mon-fri", 10) == days("0 9 * * 1-5", 10)


@pytest.mark.parametrize(("field", "expected"), [
    ("0", {0}), ("7", {0}), ("1-5", {1, 2, 3, 4, 5}), ("*/2", {0, 2, 4, 6}),
    ("1-5/2", {1, 3, 5}), ("5-7", {5, 6, 0}), ("fri-sun", {5, 6, 0}), ("sat,sun", {6, 0}),
    ("0,7", {0}), ("*", set(range(7))), ("0-7", set(range(7))),
])
def test_weekday_field_expansion(field: str, expected: set[int]) -> None:
    """Weekday fields expand like crontab(5) (numbers 0-7, names, ranges, steps)."""
    assert crontab_weekdays(field) == expected


def test_reversed_weekday_range_is_rejected() -> None:
    """A range that runs backwards (other than ending on Sunday) is an error."""
    with pytest.raises(ValueError, match="start is after the end"):
        crontab_weekdays("5-2")


def test_weekend_list_fires_saturday_and_sunday() -> None:
    """`6,0` fires on Saturday and Sunday."""
    assert days("0 9 * * 6,0", 4) == ["Sat", "Sun", "Sat", "Sun"]


def test_day_of_month_or_day_of_week_when_both_restricted() -> None:
    """`0 9 1 * mon` runs on the 1st AND on every Monday (crontab's OR rule)."""
    fires = next_fire_times(CrontabTrigger("0 9 1 * mon"), datetime(2026, 11, 29, tzinfo=UTC), 6)
    assert [f.strftime("%a %m-%d") for f in fires] == [
        "Mon 11-30", "Tue 12-01", "Mon 12-07", "Mon 12-14", "Mon 12-21", "Mon 12-28"]


def test_star_step_day_of_month_keeps_and_semantics() -> None:
    """A field starting with `*` is not "restricted": `*/10` days AND Mondays."""
    fires = next_fire_times(CrontabTrigger("0 9 */10 * 1"), datetime(2026, 1, 1, tzinfo=UTC), 3)
    assert all(f.weekday() == 0 and f.day in (1, 11, 21, 31) for f in fires)


def test_only_day_of_month() -> None:
    """Only the day of month restricted: the 1st of each month, whatever the weekday."""
    fires = next_fire_times(CrontabTrigger("0 9 1 * *"), WED, 3)
    assert [f.strftime("%m-%d") for f in fires] == ["12-01", "01-01", "02-01"]


def _matches(expr: str, t: datetime) -> bool:
    """A brute-force crontab(5) matcher (UTC), the reference for the property test."""
    minute, hour, dom, month, dow = expr.split()

    def field(text: str, value: int, low: int, high: int) -> bool:
        for item in text.split(","):
            body, _, step = item.partition("/")
            lo, hi = (low, high) if body == "*" else (
                tuple(int(x) for x in body.split("-")) if "-" in body else (int(body),) * 2)
            if lo <= value <= hi and (value - lo) % int(step or 1) == 0:
                return True
        return False

    cron_dow = (t.weekday() + 1) % 7
    dom_ok = field(dom, t.day, 1, 31)
    dow_ok = field(dow, cron_dow, 0, 7) or (cron_dow == 0 and field(dow, 7, 0, 7))
    if not dom.startswith("*") and not dow.startswith("*"):
        day_ok = dom_ok or dow_ok
    else:
        day_ok = dom_ok and dow_ok
    return (field(minute, t.minute, 0, 59) and field(hour, t.hour, 0, 23)
            and field(month, t.month, 1, 12) and day_ok)


_DOW = st.sampled_from(["*", "0", "7", "1-5", "*/2", "6,0", "5-7", "3", "1-3,5"])
_DOM = st.sampled_from(["*", "1", "13", "1,15", "*/10", "28-31"])
_MONTH = st.sampled_from(["*", "2", "*/3", "1-6"])


@settings(max_examples=60, deadline=None)
@given(dow=_DOW, dom=_DOM, month=_MONTH, start_day=st.integers(0, 365))
def test_matches_a_brute_force_crontab(dow: str, dom: str, month: str, start_day: int) -> None:
    """The next fire times equal a day-by-day crontab(5) reference, for many fields."""
    expr = f"30 9 {dom} {month} {dow}"
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=start_day)
    expected: list[datetime] = []
    t = start.replace(hour=9, minute=30)
    horizon = start + timedelta(days=4 * 366)
    while len(expected) < 4 and t < horizon:
        if t >= start and _matches(expr, t):
            expected.append(t)
        t += timedelta(days=1)
    ours = next_fire_times(CrontabTrigger(expr), start, 4)
    assert [f for f in ours if f < horizon] == expected


# -- daylight saving time -------------------------------------------------------------------

DST_DAYS = [
    ("Europe/Berlin", date(2026, 3, 29)),  # clocks go forward 02:00 → 03:00
    ("Europe/Berlin", date(2026, 10, 25)),  # clocks go back 03:00 → 02:00
    ("America/New_York", date(2026, 3, 8)),
    ("America/New_York", date(2026, 11, 1)),
]


@pytest.mark.parametrize(("zone", "day"), DST_DAYS)
@pytest.mark.parametrize("expr", ["30 2 * * *", "0 9 * * *", "30 1 * * *", "0 2 * * *"])
def test_daily_run_neither_skips_nor_doubles_across_dst(zone: str, day: date, expr: str) -> None:
    """A daily job fires exactly once on each local day around a DST change."""
    tz = ZoneInfo(zone)
    start = datetime.combine(day - timedelta(days=2), datetime.min.time(), tzinfo=tz)
    end = datetime.combine(day + timedelta(days=3), datetime.min.time(), tzinfo=tz)
    fires = list(takewhile(lambda f: f < end, fire_times(CrontabTrigger(expr, timezone=zone),
                                                         start)))
    per_day = Counter(f.astimezone(tz).date() for f in fires)
    assert per_day == {day + timedelta(days=d): 1 for d in range(-2, 3)}


@pytest.mark.parametrize(("zone", "day"), DST_DAYS)
def test_nine_o_clock_stays_nine_o_clock(zone: str, day: date) -> None:
    """09:00 local stays 09:00 local on both sides of the change."""
    tz = ZoneInfo(zone)
    start = datetime.combine(day - timedelta(days=1), datetime.min.time(), tzinfo=tz)
    fires = next_fire_times(CrontabTrigger("0 9 * * *", timezone=zone), start, 3)
    assert [f.astimezone(tz).strftime("%H:%M") for f in fires] == ["09:00"] * 3
    assert len({f.utcoffset() for f in fires}) == 1  # reported in UTC
    offsets = {f.astimezone(tz).utcoffset() for f in fires}
    assert len(offsets) == 2, "the UTC offset changed in between"


@pytest.mark.parametrize(("zone", "day", "hours"), [
    ("Europe/Berlin", date(2026, 3, 29), 23), ("Europe/Berlin", date(2026, 10, 25), 25),
    ("America/New_York", date(2026, 3, 8), 23), ("America/New_York", date(2026, 11, 1), 25),
])
def test_hourly_job_runs_every_real_hour(zone: str, day: date, hours: int) -> None:
    """`0 * * * *` is a wildcard job: it fires every real hour, 23 or 25 on a DST day."""
    tz = ZoneInfo(zone)
    start = datetime.combine(day, datetime.min.time(), tzinfo=tz)
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=tz)
    fires = list(takewhile(lambda f: f < end,
                           fire_times(CrontabTrigger("0 * * * *", timezone=zone), start)))
    assert len(fires) == hours
    assert len(set(fires)) == hours


def test_spring_forward_gap_runs_right_after_the_jump() -> None:
    """02:30 does not exist on 2026-03-29 in Berlin; like cronie, it runs once at the jump."""
    tz = ZoneInfo("Europe/Berlin")
    fire = next_fire_times(CrontabTrigger("30 2 * * *", timezone="Europe/Berlin"),
                           datetime(2026, 3, 29, tzinfo=tz), 1)[0]
    assert fire.astimezone(tz).strftime("%m-%d %H:%M %Z") == "03-29 03:00 CEST"


def test_every_half_hour_in_a_skipped_hour_lists_each_instant_once() -> None:
    """`*/30 2,3 14 3 *` in New York on 2027-03-14: 03:00 and 03:30 EDT, each once."""
    trigger = CrontabTrigger("*/30 2,3 14 3 *", timezone="America/New_York")
    fires = next_fire_times(trigger, datetime(2027, 3, 1, tzinfo=UTC), 4)
    assert fires == [datetime(2027, 3, 14, 7, 0, tzinfo=UTC),
                     datetime(2027, 3, 14, 7, 30, tzinfo=UTC),
                     datetime(2028, 3, 14, 6, 0, tzinfo=UTC),  # 02:00 EDT exists in 2028
                     datetime(2028, 3, 14, 6, 30, tzinfo=UTC)]


def test_fixed_times_in_a_skipped_hour_run_once_at_the_jump() -> None:
    """`0,30 2 * * *` skipped by the jump runs once at 03:00, never twice at one instant."""
    tz = ZoneInfo("America/New_York")
    fires = next_fire_times(CrontabTrigger("0,30 2 * * *", timezone="America/New_York"),
                            datetime(2027, 3, 13, 12, tzinfo=UTC), 3)
    assert [f.astimezone(tz).strftime("%d %H:%M %Z") for f in fires] == [
        "14 03:00 EDT", "15 02:00 EDT", "15 02:30 EDT"]


def test_fixed_time_in_a_repeated_hour_runs_once() -> None:
    """01:30 happens twice on 2027-11-07 in New York; `30 1 * * *` runs in the first pass."""
    tz = ZoneInfo("America/New_York")
    fires = next_fire_times(CrontabTrigger("30 1 * * *", timezone="America/New_York"),
                            datetime(2027, 11, 7, tzinfo=UTC), 2)
    assert [f.astimezone(tz).strftime("%d %H:%M %Z") for f in fires] == [
        "07 01:30 EDT", "08 01:30 EST"]


def _cronie(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """The instants at which cronie's main loop (cron.c) would start the job.

    A model of the loop: it wakes every real minute, reads the local clock in minutes
    and compares it with its "virtual" clock: one minute on is normal, a small jump
    forward runs every missed minute, a medium one (6 min to 3 h, DST starting) runs
    "*" jobs for now and fixed-time jobs for every skipped minute, a jump back (DST
    ending) runs only "*" jobs until the clock catches up, and 3 h or more either way
    is a clock correction: the new time is used as it is.
    """
    tz = ZoneInfo(zone)
    minute, hour = expr.split()[:2]
    fixed = not (minute.startswith("*") or hour.startswith("*"))
    epoch = datetime(1970, 1, 1)

    def clock(t: datetime) -> int:
        wall = t.astimezone(tz).replace(tzinfo=None)
        return int((wall - epoch).total_seconds()) // 60

    def due(minutes: int) -> bool:
        return _matches(expr, epoch + timedelta(minutes=minutes))

    fires, t, virtual = [], start, clock(start)
    while t < end:
        t += timedelta(minutes=1)
        running = clock(t)
        diff = running - virtual
        if diff == 1 or abs(diff) > 180:
            ran, virtual = due(running), running
        elif diff > 5:
            ran = (not fixed and due(running)) or any(
                fixed and due(v) for v in range(virtual + 1, running + 1))
            virtual = running
        elif diff > 0:
            ran = any(due(v) for v in range(virtual + 1, running + 1))
            virtual = running
        else:
            ran = not fixed and due(running)
        if ran:
            fires.append(t)
    return fires


_SHIFTS = [
    ("America/New_York", datetime(2027, 3, 14, 3, tzinfo=UTC)),
    ("America/New_York", datetime(2027, 11, 7, 3, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2027, 3, 28, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2027, 10, 31, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2027, 4, 3, 14, tzinfo=UTC)),  # a 30-minute shift
    ("Australia/Lord_Howe", datetime(2027, 10, 2, 15, tzinfo=UTC)),
    ("Pacific/Apia", datetime(2011, 12, 29, tzinfo=UTC)),  # a whole day skipped
]
_EXPRS = ["30 2 * * *", "*/30 2,3 * * *", "0,30 2 * * *", "0 2,3 * * *", "30 1 * * *",
          "*/15 1 * * *", "0 * * * *", "15 1-3 * * *", "0 3 * * *", "45 23 * * *",
          "0,30 * * * *", "10 2 * * 0"]


@pytest.mark.parametrize(("zone", "around"), _SHIFTS)
@pytest.mark.parametrize("expr", _EXPRS)
def test_fire_times_match_cronies_loop(zone: str, around: datetime, expr: str) -> None:
    """Around a clock change, fires are strictly increasing and are cronie's own."""
    start, end = around - timedelta(hours=30), around + timedelta(hours=30)
    ours = list(takewhile(lambda f: f <= end, fire_times(
        CrontabTrigger(expr, timezone=zone), start + timedelta(microseconds=1))))
    assert all(a < b for a, b in pairwise(ours))
    assert ours == _cronie(expr, zone, start, end)


# -- every, jitter, looking back ----------------------------------------------------------------


def test_every_is_on_a_shared_grid() -> None:
    """Two `every` triggers built at different moments agree on the fire times."""
    first = interval_trigger(timedelta(minutes=15))
    later = interval_trigger(timedelta(minutes=15))
    now = datetime(2026, 11, 30, 10, 7, 12, tzinfo=UTC)
    expected = [datetime(2026, 11, 30, 10, m, tzinfo=UTC) for m in (15, 30, 45)]
    assert next_fire_times(first, now) == next_fire_times(later, now) == expected


def test_every_one_second_fires_on_whole_seconds() -> None:
    """`every = "1s"` fires on whole seconds."""
    now = datetime(2026, 11, 30, 10, 0, 0, 400_000, tzinfo=UTC)
    assert next_fire_times(interval_trigger(timedelta(seconds=1)), now, 2) == [
        datetime(2026, 11, 30, 10, 0, 1, tzinfo=UTC), datetime(2026, 11, 30, 10, 0, 2, tzinfo=UTC)]


def test_every_counts_elapsed_time_across_dst() -> None:
    """`every 2h` stays 2 hours of real time apart over a DST change."""
    trigger = interval_trigger(timedelta(hours=2), timezone="Europe/Berlin")
    fires = next_fire_times(trigger, datetime(2026, 10, 24, 22, tzinfo=UTC), 4)
    assert {b - a for a, b in pairwise(fires)} == {timedelta(hours=2)}


def test_jitter_delays_within_bounds_and_the_exact_time_is_recovered() -> None:
    """A jittered trigger fires up to `jitter` late; looking back finds the exact time."""
    jittered = schedule_trigger(cron="0 9 * * *", every=None, jitter=timedelta(seconds=30))
    exact = schedule_trigger(cron="0 9 * * *", every=None)
    nine = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    for _ in range(20):
        fire = jittered.get_next_fire_time(None, nine - timedelta(minutes=1))
        assert nine <= fire <= nine + timedelta(seconds=30)
        assert previous_fire_time(exact, fire, timedelta(minutes=5)) == nine


@pytest.mark.parametrize(("cron", "every"), [("*/5 * * * *", None), (None, timedelta(minutes=5))])
def test_jitter_never_drifts_off_the_grid(cron: str | None, every: timedelta | None) -> None:
    """Chained the way APScheduler chains them, jittered fires stay next to grid points."""
    jittered = schedule_trigger(cron=cron, every=every, jitter=timedelta(seconds=200))
    grid = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    fire = jittered.get_next_fire_time(None, grid)
    for n in range(300):
        point = grid + n * timedelta(minutes=5)
        assert point <= fire <= point + timedelta(seconds=200), n
        fire = jittered.get_next_fire_time(fire, fire)


def test_previous_fire_time_respects_the_window() -> None:
    """Looking back finds the latest fire time inside the window, or None."""
    trigger = CrontabTrigger("0 9 * * *")
    now = datetime(2026, 11, 30, 9, 4, tzinfo=UTC)
    assert previous_fire_time(trigger, now, timedelta(minutes=5)) == now.replace(minute=0)
    assert previous_fire_time(trigger, now, timedelta(minutes=3)) is None


def test_schedule_trigger_needs_cron_or_every() -> None:
    """Neither cron nor every is an error."""
    with pytest.raises(ValueError, match="cron"):
        schedule_trigger(cron=None, every=None)
