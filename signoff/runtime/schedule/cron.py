"""Schedule triggers: crontab lines and ``every`` durations as APScheduler 3.11 triggers.

Three differences between crontab(5) and APScheduler's `CronTrigger` are handled here,
because users write crontab and expect crontab:

* Weekday numbers: crontab counts 0 and 7 as Sunday, APScheduler counts 0 as Monday
  (``CronTrigger.from_crontab("0 9 * * 0")`` fires on Mondays). Numbers are converted to
  day names, which both agree on.
* Day-of-month *and* day-of-week both restricted (``0 9 1 * mon``): crontab runs when
  EITHER matches, APScheduler requires both. We combine two triggers with `OrTrigger`.
* Daylight saving time, as cronie's cron(8) documents it ("Daylight Saving Time and other
  time changes"): "Local time changes of less than three hours [...] are handled in a
  special way. This only applies to jobs that run at a specific time and jobs that run
  with a granularity greater than one hour. Jobs that run more frequently are scheduled
  normally. If time was adjusted one hour forward, those jobs that would have run in the
  interval that has been skipped will be run immediately. Conversely, if time was
  adjusted backward, running the same job twice is avoided. Time changes of more than 3
  hours are considered to be corrections to the clock or the timezone, and the new time
  is used immediately." In cronie's code (cron.c, find_jobs) a job "runs more
  frequently" when its minute or hour field starts with ``*`` (``*/30 2 * * *``,
  ``0 * * * *``). So:

  - clocks go forward (02:00 → 03:00): a fixed-time job whose time falls in the skipped
    hour fires once, at the jump itself (03:00 new time), however many of its times
    were skipped; a ``*`` job simply has no fire times in the hour that does not exist;
  - clocks go back (03:00 → 02:00): a fixed-time job fires only in the first pass of
    the repeated hour; a ``*`` job fires on every real minute it matches, both passes;
  - shifts of 3 hours or more (a zone changing its offset for good) get no special
    treatment: skipped times are skipped, repeated times repeat.

  Fire times are therefore strictly increasing instants: APScheduler's own handling of
  nonexistent times listed 03:00 twice for ``*/30 2,3 14 3 *`` in New York, which is why
  matching is done here on the wall clock and mapped to instants by these rules.

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
from functools import lru_cache
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
_MAX_HOPS = 10_000  # bound on one search (offset changes crossed, repeated times skipped)
_TICK = timedelta(microseconds=1)
_CATCH_UP_LIMIT = timedelta(hours=3)  # cron(8): larger shifts are clock corrections
_PROBE = timedelta(hours=6)  # step when looking for a zone's offset changes


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
        if not body or (step_text and not step_text.isdigit()):
            raise ValueError(f"invalid weekday {item!r} (use 0-7 or mon..sun, '*', '1-5', '*/2')")
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
    """A 5-field crontab line with crontab (cronie) semantics, in one time zone.

    Matching runs on the wall clock: a `CronTrigger` (or an `OrTrigger` of two, for the
    day-of-month OR day-of-week rule) in UTC stands for "local wall time, no DST". Each
    wall-clock match is then turned into an instant by the DST rules of the module doc.
    """

    __slots__ = ("expression", "fixed_time", "jitter", "timezone", "walls")

    def __init__(self, expression: str, *, timezone: str | tzinfo = "UTC",
                 jitter: float | None = None) -> None:
        fields = expression.split()
        if len(fields) != 5:
            raise ValueError(f"expected 5 fields (minute hour day month weekday): {expression!r}")
        minute, hour, day, month, weekday = (f.lower() for f in fields)
        self.expression = " ".join(fields).lower()
        self.timezone = ZoneInfo(timezone) if isinstance(timezone, str) else timezone
        self.jitter = jitter
        # cronie's MIN_STAR / HR_STAR flags: a "*" job keeps the real clock's rhythm.
        self.fixed_time = not (minute.startswith("*") or hour.startswith("*"))
        dow = _aps_weekdays(weekday)
        common = {"minute": minute, "hour": hour, "month": month, "timezone": UTC}
        # crontab(5): "If both fields are restricted (i.e., do not start with *), the command
        # will be run when either field matches the current time."
        self.walls: BaseTrigger
        if not day.startswith("*") and not weekday.startswith("*"):
            self.walls = OrTrigger([CronTrigger(day=day, day_of_week="*", **common),
                                    CronTrigger(day="*", day_of_week=dow, **common)])
        else:
            self.walls = CronTrigger(day=day, day_of_week=dow, **common)

    def get_next_fire_time(self, previous_fire_time: datetime | None,
                           now: datetime) -> datetime | None:
        """The first fire time after ``previous_fire_time`` (or at/after ``now``), jittered.

        Strictly after the previous fire, whatever ``now`` says: APScheduler enumerates
        missed fires this way, and the same instant twice would be two runs under one key.
        """
        start = now if previous_fire_time is None else previous_fire_time + _TICK
        fire = self._first_at_or_after(start.astimezone(UTC))
        return self._apply_jitter(fire, self.jitter, now)

    def _next_wall(self, wall: datetime) -> datetime | None:
        """The first wall-clock match at or after ``wall`` (both naive local times)."""
        found = self.walls.get_next_fire_time(None, wall.replace(tzinfo=UTC))
        return found.replace(tzinfo=None) if found is not None else None

    def _first_at_or_after(self, t: datetime) -> datetime | None:
        zone = self.timezone
        offset = _offset(zone, t)
        if self._catches_up(t, _offset(zone, t - _TICK), offset):
            return t  # ``t`` is itself the instant of a jump that skipped a fire
        for _ in range(_MAX_HOPS):
            match = self._next_wall(_naive(t + offset))
            if match is None:
                return None
            candidate = match.replace(tzinfo=UTC) - offset
            change = _next_change(zone, t, candidate)
            if change is None:  # the match lies in t's stretch of constant offset
                if self.fixed_time and _second_pass(zone, candidate):
                    t = candidate + _TICK
                    continue
                return candidate
            new = _offset(zone, change)
            if self._catches_up(change, offset, new):
                return change
            t, offset = change, new
        return None

    def _catches_up(self, change: datetime, old: timedelta, new: timedelta) -> bool:
        """True when clocks jumped forward at ``change`` over a time this job runs at."""
        if not self.fixed_time or not timedelta(0) < new - old < _CATCH_UP_LIMIT:
            return False
        skipped = self._next_wall(_naive(change + old))
        return skipped is not None and skipped < _naive(change + new)

    def __str__(self) -> str:
        return f"crontab[{self.expression} {self.timezone}]"

    def __repr__(self) -> str:
        return f"<CrontabTrigger ({self.expression!r}, timezone={self.timezone!s})>"


def _offset(zone: tzinfo, t: datetime) -> timedelta:
    return t.astimezone(zone).utcoffset() or timedelta(0)


def _naive(t: datetime) -> datetime:
    """An aware UTC datetime shifted by an offset, read as a naive wall-clock time."""
    return t.replace(tzinfo=None)


def _second_pass(zone: tzinfo, fire: datetime) -> bool:
    """True when ``fire`` is the second occurrence of its wall time (clocks went back by
    less than 3 hours); compared in UTC, since aware datetimes sharing a tzinfo compare by
    wall time and ignore fold."""
    wall = fire.astimezone(zone).replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return first < second < first + _CATCH_UP_LIMIT and fire == second


def _next_change(zone: tzinfo, after: datetime, until: datetime) -> datetime | None:
    """The first instant in (after, until] at which ``zone``'s UTC offset changes."""
    for year in range(after.year, until.year + 1):
        for change in _changes(zone, year):
            if change > until:
                return None
            if change > after:
                return change
    return None


@lru_cache(maxsize=512)
def _changes(zone: tzinfo, year: int) -> tuple[datetime, ...]:
    """The instants of ``year`` (UTC) at which ``zone``'s offset changes, found by probing.

    zoneinfo has no public list of transitions. Probes every few hours find each change,
    bisection pins it to the second (tzdata transitions fall on whole seconds); two
    changes within one probe step would be missed, and no zone has those.
    """
    t, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    found = []
    offset = _offset(zone, t)
    while t < end:
        probe = min(t + _PROBE, end)
        if _offset(zone, probe) != offset:
            low, high = int(t.timestamp()), int(probe.timestamp())
            while high - low > 1:
                mid = (low + high) // 2
                if _offset(zone, datetime.fromtimestamp(mid, UTC)) == offset:
                    low = mid
                else:
                    high = mid
            found.append(datetime.fromtimestamp(high, UTC))
            offset = _offset(zone, probe)
        t = probe
    return tuple(found)


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
