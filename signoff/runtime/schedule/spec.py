"""A schedule as the scheduler reads it: plain frozen values, already converted.

The config layer builds these from ``[[schedules]]`` (`signoff.config.ops.Schedule.to_runtime`);
the scheduler never sees the config models. Kept apart from `scheduler` so that reading the
config does not import APScheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from zoneinfo import ZoneInfo

from signoff.runtime.canonical import canonical_json, sha256_hex
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

    @property
    def definition(self) -> str:
        """sha256 of what the schedule does: its name, goal and steps (each tool with its
        arguments). Its runs' Always grants belong to it (`Task.schedule_definition`): a
        person approved an action for *this* goal, and a grant covers the action's
        targets, never its content, so a schedule given another goal or other steps —
        or a new one under a removed one's name — must ask again. When it runs (cron,
        every, zone, jitter, grace, timeout, enabled) and its guards (prohibit,
        cron_mode) are not part of it: editing those keeps the grants, as does a restart.
        """
        steps = None if self.steps is None else [{"tool": s.tool, "args": s.args}
                                                 for s in self.steps]
        return sha256_hex(canonical_json({"name": self.name, "goal": self.goal,
                                          "steps": steps}))
