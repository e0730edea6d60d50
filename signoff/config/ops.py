"""Config sections for unattended work: `[[schedules]]`, `[oncall]` and `[[notify]]`.

Split from `signoff.config.settings` (which re-exports every name here) to keep modules small.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Self
from zoneinfo import ZoneInfo

from pydantic import Field, field_validator, model_validator

from signoff.bot.routing import oncall
from signoff.config.checks import (
    ActorKey,
    AwareDatetime,
    Duration,
    GrantTable,
    Handoff,
    NonEmpty,
    NotifyChannel,
    PositiveDuration,
    TimezoneName,
    check_cron,
    parse_handoff,
    problem,
    problems,
)
from signoff.config.fields import CronMode, NotifyEvent, Section
from signoff.runtime.models import JsonDict
from signoff.runtime.schedule import spec


class StepSpec(Section):
    """One explicit step: a tool name and its arguments."""

    tool: NonEmpty
    args: JsonDict = {}

    def to_runtime(self) -> spec.ScheduleStep:
        """The step as the scheduler reads it."""
        return spec.ScheduleStep(tool=self.tool, args=dict(self.args))


class Schedule(Section):
    """[[schedules]]: a goal (or steps) run on a cron line or every N."""

    name: NonEmpty
    cron: str | None = None
    every: PositiveDuration | None = None
    timezone: TimezoneName = "UTC"
    goal: str = ""
    steps: list[StepSpec] | None = None
    prohibit: list[NonEmpty] = []
    cron_mode: CronMode | None = None  # None: inherit approvals.cron_mode
    enabled: bool = True
    jitter: Duration | None = None
    misfire_grace: PositiveDuration = timedelta(minutes=5)
    timeout: PositiveDuration | None = None
    grants: list[GrantTable] = []
    approvers: list[ActorKey] | None = None

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return None if value is None else check_cron(value)

    @model_validator(mode="after")
    def _when_and_what(self) -> Self:
        if (self.cron is None) == (self.every is None):
            raise ValueError("set exactly one of 'cron' or 'every'")
        if not self.goal.strip():
            if not self.steps:
                raise problem("goal", "a schedule needs a goal or steps")
            object.__setattr__(self, "goal", f"scheduled: {self.name}")  # frozen model
        return self

    def to_runtime(self) -> spec.Schedule:
        """The entry as the scheduler reads it (``grants`` and ``approvers`` are read by
        the policy and the on-call router)."""
        return spec.Schedule(
            name=self.name, goal=self.goal, zone=ZoneInfo(self.timezone),
            misfire_grace=self.misfire_grace, cron=self.cron, every=self.every,
            steps=None if self.steps is None else tuple(s.to_runtime() for s in self.steps),
            prohibit=tuple(self.prohibit), cron_mode=self.cron_mode, enabled=self.enabled,
            jitter=self.jitter, timeout=self.timeout)


class Rotation(Section):
    """[[oncall.rotations]]: members taking turns as approvers."""

    name: NonEmpty
    members: list[ActorKey]
    period: PositiveDuration = timedelta(weeks=1)
    handoff: Handoff = "mon 09:00"  # weekday + HH:MM; for periods under a week only the time
    timezone: TimezoneName = "UTC"
    start: date = date(2026, 1, 5)  # a Monday
    escalate_after: PositiveDuration | None = None
    next: str | None = None  # rotation to escalate to
    repeat_limit: int = Field(default=1, ge=0)

    @field_validator("members")
    @classmethod
    def _members(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("rotation has no members")
        return value

    def to_runtime(self) -> oncall.Rotation:
        """The rotation as on-call routing reads it, its handoff parsed (a weekday, 0 =
        Monday, and a local time; Monday when only a time was given)."""
        weekday, at = parse_handoff(self.handoff)
        return oncall.Rotation(
            name=self.name, members=tuple(self.members), period=self.period,
            handoff_weekday=weekday, handoff_time=at, zone=ZoneInfo(self.timezone),
            start=self.start, repeat_limit=self.repeat_limit,
            escalate_after=self.escalate_after, next=self.next)


class OncallOverride(Section):
    """[[oncall.overrides]]: ``who`` is on call from ``from`` until ``until``."""

    who: ActorKey
    start: AwareDatetime = Field(alias="from")
    until: AwareDatetime
    rotation: str | None = None  # None: every rotation

    @model_validator(mode="after")
    def _order(self) -> Self:
        if self.until <= self.start:
            raise problem("until", "must be later than 'from'")
        return self

    def to_runtime(self) -> oncall.Override:
        """The override as on-call routing reads it."""
        return oncall.Override(who=self.who, start=self.start, until=self.until,
                               rotation=self.rotation)


class OncallSettings(Section):
    """[oncall]: rotations and temporary overrides."""

    rotations: list[Rotation] = []
    overrides: list[OncallOverride] = []

    @model_validator(mode="after")
    def _references(self) -> Self:
        names = [r.name for r in self.rotations]
        found: list[tuple[str, str]] = []
        for i, rot in enumerate(self.rotations):
            if rot.name in names[:i]:
                found.append((f"rotations[{i}].name", f"duplicate rotation {rot.name!r}"))
            if rot.next is not None and (rot.next not in names or rot.next == rot.name):
                found.append((f"rotations[{i}].next", _no_rotation(rot.next, names)))
        for i, over in enumerate(self.overrides):
            if over.rotation is not None and over.rotation not in names:
                found.append((f"overrides[{i}].rotation", _no_rotation(over.rotation, names)))
        if found:
            raise problems(found)
        return self


def _no_rotation(name: str, names: list[str]) -> str:
    known = ", ".join(dict.fromkeys(names)) or "none"
    return f"no other rotation is named {name!r} (known: {known})"


# auto_approved by default: a message that went out without a person is never silent.
_DEFAULT_EVENTS = ["waiting_approval", "auto_approved", "completed", "failed", "blocked"]


class NotifySettings(Section):
    """[[notify]]: a team channel that hears about task events."""

    channel: NotifyChannel
    events: list[NotifyEvent] = [NotifyEvent(e) for e in _DEFAULT_EVENTS]
    include_content: bool = False

    @property
    def platform(self) -> str:
        """The channel prefix: the surface it is on (``slack``, ``telegram``)."""
        return self.channel.partition(":")[0]

    @property
    def target(self) -> str:
        """The channel or chat id on that platform."""
        return self.channel.partition(":")[2]
