"""Schedule triggers: crontab lines and ``every`` durations as APScheduler 3.11 triggers.

Three differences between crontab(5) and APScheduler's `CronTrigger` are handled here,
because users write crontab and expect crontab:

* Weekday numbers: crontab counts 0 and 7 as Sunday, APScheduler counts 0 as Monday
  (``CronTrigger.from_crontab("0 9 * * 0")`` fires on Mondays). Numbers are converted to
  day names, which both agree on.
* Day-of-month *and* day-of-week both restricted (``0 9 1 * mon``): crontab runs when
  EITHER matches, APScheduler requires both. We combine two triggers with `OrTrigger`.
* Daylight saving time: on the night clocks go back, APScheduler 3.11 fires a job at
  ``30 2 * * *`` twice (02:30 happens twice). Like cronie, a job at a fixed time runs once
  (the first 02:30); jobs with ``*`` in the minute or hour field keep running every real
  hour. When clocks go forward, a time that does not exist runs once, an hour later.

``every`` schedules count elapsed time from a fixed anchor (2000-01-01 00:00 in the
schedule's time zone), not from the moment a daemon started, so every node sharing a
database agrees on the fire times — that is what makes the (schedule, fire_time) key
exactly-once across nodes. For the same reason jitter only delays a fire: the key is the
un-jittered time, found again with `previous_fire_time` (jitter must stay below the
period).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

__all__ = [
    "CrontabTrigger", "EveryTrigger", "crontab_weekdays", "fire_times", "interval_trigger",
    "next_fire_times", "previous_fire_time", "schedule_trigger",
]  # fmt: skip

# crontab numbering: index = crontab weekday number (0 = Sunday, 7 is Sunday again).
_CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
EVERY_ANCHOR = datetime(2000, 1, 1)  # wall time in the schedule's zone; a Saturday
_MAX_STEPS = 200_000  # bound on walking a trigger (a per-minute cron over ~4 months)
_TICK = timedelta(microseconds=1)


def _day_number(token: str) -> int:
    if token in _CRON_DAYS:
        return _CRON_DAYS.index(token)
    if token.isdigit() and int(token) <= 7:
        return int(token)
    raise ValueError(f"invalid weekday {token!r} (use 0-7, where 0 and 7 are Sunday, or mon..sun)")


def crontab_weekdays(field: str) -> frozenset[int]:
    """The days a crontab weekday field selects, as crontab numbers 0 (Sunday) .. 6.

    ``"1-5"`` → Mon–Fri, ``"0"``/``"7"``/``"sun"`` → Sunday, ``"*/2"`` → Sun, Tue, Thu,
    Sat (steps count from the range start, as in crontab), ``"fri-sun"`` → Fri, Sat, Sun.
    """
    days: set[int] = set()
    for item in field.lower().split(","):
        body, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"invalid step in weekday {item!r}")
        if body == "*":
            low, high = 0, 7
        elif "-" in body:
            first, _, last = body.partition("-")
            low, high = _day_number(first), _day_number(last)
            if high < low and high == 0:
                high = 7  # "fri-sun": Sunday as the end of a range is day 7
            if high < low:
                raise ValueError(f"invalid weekday range {item!r} (the start is after the end)")
        else:
            low = high = _day_number(body)
        days.update(day % 7 for day in range(low, high + 1, step))
    return frozenset(days)


def _aps_weekdays(field: str) -> str:
    days = crontab_weekdays(field)
    if len(days) == 7:
        return "*"
    # Names mean the same day in crontab and APScheduler; numbers do not.
    return ",".join(_CRON_DAYS[d] for d in sorted(days, key=lambda d: (d - 1) % 7))


class CrontabTrigger(BaseTrigger):
    """A 5-field crontab line with crontab semantics, in one time zone.

    Wraps a `CronTrigger` (or an `OrTrigger` of two, for the day-of-month OR day-of-week
    rule) and drops the second occurrence of a fixed wall-clock time when clocks go back.
    """

    __slots__ = ("expression", "inner", "jitter", "timezone", "wildcard_time")

    def __init__(self, expression: str, *, timezone: str | tzinfo = "UTC",
                 jitter: float | None = None) -> None:
        fields = expression.split()
        if len(fields) != 5:
            raise ValueError(f"expected 5 fields (minute hour day month weekday): {expression!r}")
        minute, hour, day, month, weekday = (f.lower() for f in fields)
        self.expression = " ".join(fields).lower()
        self.timezone = ZoneInfo(timezone) if isinstance(timezone, str) else timezone
        self.jitter = jitter
        # cronie: a job with "*" in its minute or hour field is a "wildcard" job and keeps
        # its rhythm through a DST change; a job at a fixed time runs once.
        self.wildcard_time = minute.startswith("*") or hour.startswith("*")
        dow = _aps_weekdays(weekday)
        common = {"minute": minute, "hour": hour, "month": month, "timezone": self.timezone}
        # crontab(5): "If both fields are restricted (i.e., do not start with *), the command
        # will be run when either field matches the current time."
        self.inner: BaseTrigger
        if not day.startswith("*") and not weekday.startswith("*"):
            self.inner = OrTrigger([CronTrigger(day=day, day_of_week="*", **common),
                                    CronTrigger(day="*", day_of_week=dow, **common)])
        else:
            self.inner = CronTrigger(day=day, day_of_week=dow, **common)

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        """The next fire time after ``previous_fire_time`` (or from ``now``), jittered."""
        fire = self.inner.get_next_fire_time(previous_fire_time, now)
        while fire is not None and self._repeated_wall_time(fire):
            fire = self.inner.get_next_fire_time(fire, fire)
        return self._apply_jitter(fire, self.jitter, now)

    def _repeated_wall_time(self, fire: datetime) -> bool:
        """True for the second occurrence of an ambiguous local time (clocks went back)."""
        if self.wildcard_time:
            return False
        wall = fire.astimezone(self.timezone).replace(tzinfo=None)
        # Compared in UTC: aware datetimes sharing a tzinfo compare by wall time, ignoring
        # fold. In a fall-back overlap fold=1 is the later instant; in a spring-forward gap
        # it is the earlier one, and gap times are not repeats.
        first = wall.replace(tzinfo=self.timezone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self.timezone, fold=1).astimezone(UTC)
        return second > first and fire.astimezone(UTC) == second

    def __str__(self) -> str:
        return f"crontab[{self.expression} {self.timezone}]"

    def __repr__(self) -> str:
        return f"<CrontabTrigger ({self.expression!r}, timezone={self.timezone!s})>"


class EveryTrigger(BaseTrigger):
    """Every ``every`` of elapsed time on a fixed grid, with jitter that never drifts.

    APScheduler's `IntervalTrigger` adds the interval to the previous (jittered) fire
    time, so jitter accumulates period after period and the runs leave the grid that the
    exactly-once key is built on. Here each fire is the next grid point, then jittered.
    """

    __slots__ = ("every", "grid", "jitter")

    def __init__(self, every: timedelta, *, timezone: str = "UTC",
                 jitter: float | None = None) -> None:
        if every <= timedelta():
            raise ValueError("an interval must be longer than 0s")
        self.every = every
        self.jitter = jitter
        anchor = EVERY_ANCHOR.replace(tzinfo=ZoneInfo(timezone)).astimezone(UTC)
        # Elapsed time, so the grid itself is in UTC: "every 2h" stays 2h across DST.
        self.grid = IntervalTrigger(seconds=every.total_seconds(), start_date=anchor,
                                    timezone=UTC)

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        """The first grid point after ``previous_fire_time`` (or at/after ``now``)."""
        start = now if previous_fire_time is None else previous_fire_time + _TICK
        fire = self.grid.get_next_fire_time(None, start)
        return self._apply_jitter(fire, self.jitter, now)

    def __str__(self) -> str:
        return f"every[{self.every}]"

    def __repr__(self) -> str:
        return f"<EveryTrigger (every={self.every!s}, jitter={self.jitter})>"


def interval_trigger(every: timedelta, *, timezone: str = "UTC",
                     jitter: float | None = None) -> EveryTrigger:
    """Every ``every`` of elapsed time, on a grid all nodes share (see the module doc)."""
    return EveryTrigger(every, timezone=timezone, jitter=jitter)


def schedule_trigger(*, cron: str | None, every: timedelta | None, timezone: str = "UTC",
                     jitter: timedelta | None = None) -> BaseTrigger:
    """The trigger of one ``[[schedules]]`` entry (exactly one of cron / every)."""
    spread = jitter.total_seconds() if jitter else None
    if cron is not None:
        return CrontabTrigger(cron, timezone=timezone, jitter=spread)
    if every is not None:
        return interval_trigger(every, timezone=timezone, jitter=spread)
    raise ValueError("a schedule needs 'cron' or 'every'")


def fire_times(trigger: BaseTrigger, start: datetime) -> Iterator[datetime]:
    """Fire times from ``start`` (inclusive) onwards, in order, in UTC.

    UTC because aware datetimes in one zone compare and hash by wall time, ignoring
    ``fold``: the two 02:30 of a DST night would look equal.
    """
    fire: datetime | None = trigger.get_next_fire_time(None, start)
    for _ in range(_MAX_STEPS):
        if fire is None:
            return
        yield fire.astimezone(UTC)
        fire = trigger.get_next_fire_time(fire, fire)


def next_fire_times(trigger: BaseTrigger, now: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` fire times at or after ``now``, in UTC."""
    out: list[datetime] = []
    for fire in fire_times(trigger, now):
        if len(out) == count:
            break
        out.append(fire)
    return out


def previous_fire_time(trigger: BaseTrigger, now: datetime,
                       window: timedelta) -> datetime | None:
    """The latest fire time in ``[now - window, now]`` of an un-jittered trigger, in UTC.

    APScheduler does not hand a job its scheduled time; triggers are deterministic, so
    the time is found again from the trigger (the same on every node).
    """
    last: datetime | None = None
    for fire in fire_times(trigger, now - window):
        if fire > now:
            break
        last = fire
    return last
