"""A schedule as the scheduler reads it: plain frozen values, already converted.

The config layer builds these from ``[[schedules]]`` (`signoff.config.ops.Schedule.to_runtime`);
the scheduler never sees the config models. Kept apart from `scheduler` so that reading the
config does not import APScheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from zoneinfo import ZoneInfo

from signoff.runtime.models import Action, JsonDict
from signoff.runtime.policy.unattended import CronMode

__all__ = ["Schedule", "ScheduleStep"]


@dataclass(frozen=True)
class ScheduleStep:
    """One explicit step of a schedule: a tool name and its arguments."""

    tool: str
    args: JsonDict

    def action(self) -> Action:
        """A fresh action for one run (its own copy of the arguments)."""
        return Action(tool=self.tool, args=dict(self.args))


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A goal (or explicit steps) run on a cron line or every ``every``, in ``zone``.

    Exactly one of ``cron`` and ``every`` is set (the config checks it).
    """

    name: str
    goal: str
    zone: ZoneInfo
    misfire_grace: timedelta
    cron: str | None = None
    every: timedelta | None = None
    steps: tuple[ScheduleStep, ...] | None = None  # None: the planner plans the goal
    prohibit: tuple[str, ...] = ()
    cron_mode: CronMode | None = None  # None: the engine's default
    enabled: bool = True
    jitter: timedelta | None = None
    timeout: timedelta | None = None  # None: the global approval timeout

    def actions(self) -> list[Action] | None:
        """The explicit steps as actions for one run, or None when the goal is planned."""
        return None if self.steps is None else [s.action() for s in self.steps]
