"""Who is on call: computed from the rotations, the overrides and the time — never stored.

A rotation hands over every ``period`` at its ``handoff`` (weekday and local time, in the
rotation's time zone), starting from ``start``; periods of whole days are counted in
local calendar days, so a 09:00 handoff stays at 09:00 local time across DST changes
(shorter periods count elapsed time). The rotation is periodic in both directions:
``start`` only fixes the phase. An active override (``who`` from ``from`` until
``until``, for one rotation or all of them) replaces the rotation's member; when several
are active, the one that started last wins (the later entry on a tie).

First-line rotations are those no other rotation escalates to (``next``); their members
are "the current on-call approvers". Escalation follows ``next`` from each first-line
rotation; a rotation is visited at most ``1 + repeat_limit`` times along a chain, which
bounds loops such as primary → secondary → primary.

Pure functions over `Rotation` and `Override`, plain values the config layer builds from
``[[oncall.rotations]]`` and ``[[oncall.overrides]]`` (``to_runtime`` on those models).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from signoff.runtime.clock import Clock
from signoff.runtime.models import JsonDict, RunMode, Task

__all__ = [
    "EscalationStep", "OnCallRouter", "OnCallShift", "Override", "Rotation",
    "current_approvers", "escalation_chain", "escalation_targets", "first_line",
    "next_escalation", "shift_at", "who_is_on_call",
]  # fmt: skip

_DAY = timedelta(days=1)
_WEEK = timedelta(weeks=1)


@dataclass(frozen=True, kw_only=True)
class Rotation:
    """Members taking turns as approvers, handing over every ``period`` at
    ``handoff_weekday`` (0 = Monday) ``handoff_time`` in ``zone``, phased from ``start``."""

    name: str
    members: tuple[str, ...]
    period: timedelta
    handoff_weekday: int
    handoff_time: time
    zone: ZoneInfo
    start: date
    repeat_limit: int  # visits of this rotation along one escalation chain, after the first
    escalate_after: timedelta | None = None  # None: this rotation never escalates
    next: str | None = None  # the rotation escalated to


@dataclass(frozen=True, kw_only=True)
class Override:
    """``who`` is on call from ``start`` until ``until`` (aware datetimes), for the
    rotation named ``rotation`` or, when None, for all of them."""

    who: str
    start: datetime
    until: datetime
    rotation: str | None = None


@dataclass(frozen=True)
class OnCallShift:
    """One person on call for one rotation, from ``since`` until ``until`` (UTC)."""

    rotation: str
    member: str
    since: datetime
    until: datetime
    override: bool = False


@dataclass(frozen=True)
class EscalationStep:
    """Where a request goes when its current level has waited ``after``."""

    level: int  # the level reached by taking this step
    after: timedelta
    rotations: tuple[str, ...]
    members: tuple[str, ...]


def _first_handoff(rot: Rotation) -> date:
    # Weekly (or longer) rotations hand over on the handoff weekday; shorter ones only
    # use the time, from the start date on.
    if rot.period >= _WEEK:
        return rot.start + timedelta(days=(rot.handoff_weekday - rot.start.weekday()) % 7)
    return rot.start


def _wall(day: date, at: time, zone: ZoneInfo) -> datetime:
    # fold=0: an ambiguous handoff (clocks going back) is the first occurrence; one in a
    # spring-forward gap lands an hour later. Either way it exists exactly once.
    return datetime.combine(day, at, tzinfo=zone).astimezone(UTC)


def _regular_shift(rot: Rotation, at: datetime) -> tuple[int, datetime, datetime]:
    """(shift number, since, until) of the rotation's own schedule at ``at``."""
    zone = rot.zone
    first = _first_handoff(rot)
    if rot.period % _DAY == timedelta():
        days = rot.period // _DAY
        number = (at.astimezone(zone).date() - first).days // days
        since = _wall(first + timedelta(days=number * days), rot.handoff_time, zone)
        if at < since:  # same local day, before the handoff time
            number -= 1
            since = _wall(first + timedelta(days=number * days), rot.handoff_time, zone)
        until = _wall(first + timedelta(days=(number + 1) * days), rot.handoff_time, zone)
        return number, since, until
    origin = _wall(first, rot.handoff_time, zone)
    number = (at - origin) // rot.period
    since = origin + number * rot.period
    return number, since, since + rot.period


def _applies(over: Override, rot: Rotation) -> bool:
    return over.rotation is None or over.rotation == rot.name


def shift_at(rot: Rotation, overrides: Iterable[Override], at: datetime) -> OnCallShift:
    """Who is on call for one rotation at ``at`` (overrides included)."""
    mine = [o for o in overrides if _applies(o, rot)]
    active = [(o.start, i, o) for i, o in enumerate(mine) if o.start <= at < o.until]
    if active:
        _, _, over = max(active, key=lambda item: (item[0], item[1]))
        return OnCallShift(rot.name, over.who, over.start.astimezone(UTC),
                           over.until.astimezone(UTC), override=True)
    number, since, until = _regular_shift(rot, at)
    # The shift really ends when an override takes over, if that comes first.
    upcoming = [o.start for o in mine if at < o.start < until]
    if upcoming:
        until = min(upcoming).astimezone(UTC)
    return OnCallShift(rot.name, rot.members[number % len(rot.members)], since, until)


def who_is_on_call(rotations: Sequence[Rotation], overrides: Sequence[Override],
                   at: datetime) -> list[OnCallShift]:
    """The current shift of every rotation, in configuration order."""
    return [shift_at(rot, overrides, at) for rot in rotations]


def first_line(rotations: Sequence[Rotation]) -> list[Rotation]:
    """Rotations no other rotation escalates to (the first if every one is a target)."""
    targets = {r.next for r in rotations if r.next}
    found = [r for r in rotations if r.name not in targets]
    return found or list(rotations[:1])


def current_approvers(rotations: Sequence[Rotation], overrides: Sequence[Override],
                      at: datetime) -> set[str]:
    """Actor keys of whoever is on call now in a first-line rotation."""
    return {shift_at(rot, overrides, at).member for rot in first_line(rotations)}


def escalation_chain(rotations: Sequence[Rotation], start: str) -> list[Rotation]:
    """``start`` and the rotations its ``next`` links lead to, loops bounded."""
    by_name = {r.name: r for r in rotations}
    chain: list[Rotation] = []
    visits: Counter[str] = Counter()
    current = by_name.get(start)
    while current is not None and visits[current.name] <= current.repeat_limit:
        chain.append(current)
        visits[current.name] += 1
        current = by_name.get(current.next) if current.next else None
    return chain


def escalation_targets(rotations: Sequence[Rotation], overrides: Sequence[Override],
                       rotation_name: str, level: int,
                       at: datetime) -> tuple[Rotation, list[str]] | None:
    """The rotation at ``level`` of the chain starting at ``rotation_name`` and who is on
    call in it at ``at``; None past the end of the chain."""
    chain = escalation_chain(rotations, rotation_name)
    if not 0 <= level < len(chain):
        return None
    rot = chain[level]
    return rot, [shift_at(rot, overrides, at).member]


def next_escalation(rotations: Sequence[Rotation], overrides: Sequence[Override],
                    level: int, at: datetime) -> EscalationStep | None:
    """The step from ``level`` to ``level + 1``, or None when no chain goes further.

    Every first-line rotation starts a chain; chains advance together (a request has one
    level). The wait is the shortest ``escalate_after`` among the level's rotations that
    have somewhere to go; a rotation without ``escalate_after`` never escalates.
    """
    movers = []
    for entry in first_line(rotations):
        chain = escalation_chain(rotations, entry.name)
        if len(chain) > level + 1 and chain[level].escalate_after is not None:
            movers.append((chain[level].escalate_after, chain[level + 1]))
    if not movers:
        return None
    after = min(wait for wait, _ in movers if wait is not None)
    targets = list(dict.fromkeys(rot.name for _, rot in movers))
    by_name = {rot.name: rot for _, rot in movers}
    members = [shift_at(by_name[name], overrides, at).member for name in targets]
    return EscalationStep(level + 1, after, tuple(targets), tuple(dict.fromkeys(members)))


class OnCallRouter:
    """The on-call view the daemon's parts share, always computed from the Clock.

    ``current`` feeds `Authorizer.oncall`; ``approvers_for`` gives the first approvers of
    a request (a scheduled run's own ``approvers`` if set, else whoever is on call).
    """

    def __init__(self, *, rotations: Sequence[Rotation],
                 overrides: Sequence[Override] = (), clock: Clock,
                 schedule_approvers: Mapping[str, Sequence[str]] | None = None) -> None:
        self.rotations = list(rotations)
        self.overrides = list(overrides)
        self.clock = clock
        self.schedule_approvers = dict(schedule_approvers or {})

    def current(self) -> set[str]:
        """Who is on call right now (first-line rotations)."""
        if not self.rotations:
            return set()
        return current_approvers(self.rotations, self.overrides, self.clock.now())

    def shifts(self, at: datetime | None = None) -> list[OnCallShift]:
        """Every rotation's shift at ``at`` (default: now)."""
        return who_is_on_call(self.rotations, self.overrides, at or self.clock.now())

    def describe(self, at: datetime | None = None) -> JsonDict:
        """The ``GET /oncall`` body: who approves, and every rotation's shift at ``at``."""
        when = at or self.clock.now()
        rows = []
        for rot, shift in zip(self.rotations, self.shifts(when), strict=True):
            chain = escalation_chain(self.rotations, rot.name)
            rows.append({
                "rotation": rot.name, "member": shift.member, "since": shift.since.isoformat(),
                "until": shift.until.isoformat(), "override": shift.override,
                "timezone": rot.zone.key,
                "escalates_to": chain[1].name if len(chain) > 1 else None,
                "escalate_after": (rot.escalate_after.total_seconds()
                                   if rot.escalate_after is not None else None)})
        on_call = (sorted(current_approvers(self.rotations, self.overrides, when))
                   if self.rotations else [])
        return {"at": when.isoformat(), "on_call": on_call, "rotations": rows}

    def approvers_for(self, task: Task) -> list[str]:
        """Level-0 approvers of a request of ``task``: only scheduled runs are routed."""
        if task.mode is not RunMode.SCHEDULED:
            return []
        explicit = self.schedule_approvers.get(task.schedule or "")
        if explicit:
            return list(explicit)
        return sorted(self.current())
