"""Planners turn a goal into actions: a Protocol, and the rules planner from `[[recipes]]`.

A planner proposes tool calls only; the registry decides each action's risk class,
capability, targets and fingerprint, so a planner can raise a risk but never lower it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from signoff.errors import PlannerError
from signoff.runtime.models import Action, JsonDict


@dataclass(frozen=True)
class Plan:
    """A planner's actions, with how they were planned when that matters: ``planner``
    (e.g. ``{"kind": "openai", "fallback": "recipes", "error": ...}``) is kept in the
    task's ``result.planner``, and a fallback is audited."""

    actions: list[Action]
    planner: JsonDict | None = None


@runtime_checkable
class Planner(Protocol):
    """Anything with ``plan(goal, **kwargs)`` returning actions (sync or async), or a
    `Plan` that also says how they were planned.

    kwargs carry context such as ``tools`` (the registry's function schemas).
    """

    def plan(self, goal: str, **kwargs: Any
             ) -> list[Action] | Plan | Awaitable[list[Action] | Plan]:
        """Propose the actions for ``goal``."""
        ...


def _accepted(planner: Planner, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The context a planner's ``plan`` takes: all of it with ``**kwargs``, else the named
    ones (a planner written as ``plan(goal, tools)`` must not get a ``notes`` it never asked
    for)."""
    try:
        params = inspect.signature(planner.plan).parameters.values()
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return kwargs
    names = {p.name for p in params}
    return {k: v for k, v in kwargs.items() if k in names}


async def call_planner(planner: Planner, goal: str, **kwargs: Any) -> Plan:
    """Call a sync or async planner and check what comes back."""
    result = planner.plan(goal, **_accepted(planner, kwargs))
    if inspect.isawaitable(result):
        result = await result
    plan = result if isinstance(result, Plan) else Plan(result)  # type: ignore[arg-type]
    if not isinstance(plan.actions, list) or not all(isinstance(a, Action)
                                                     for a in plan.actions):
        raise PlannerError(f"planner {type(planner).__name__} did not return a list of Action")
    return plan


@dataclass(frozen=True)
class Recipe:
    """One rule: when the goal matches ``pattern``, plan ``steps``."""

    name: str
    pattern: str
    steps: tuple[tuple[str, dict[str, Any]], ...]


def _fill(value: Any, names: dict[str, str]) -> Any:
    """Substitute ``{goal}`` and named regex groups into string arguments."""
    if isinstance(value, str):
        try:
            return value.format_map(names)
        except (KeyError, ValueError, IndexError):
            return value
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


class RulesPlanner:
    """Deterministic planning from recipes: the first matching recipe wins."""

    def __init__(self, recipes: Sequence[Recipe] = ()) -> None:
        self.recipes = list(recipes)
        self._compiled = [(r, re.compile(r.pattern, re.IGNORECASE)) for r in self.recipes]

    def plan(self, goal: str, **kwargs: Any) -> list[Action]:
        """The steps of the first recipe whose pattern is found in the goal."""
        for recipe, pattern in self._compiled:
            match = pattern.search(goal)
            if match:
                names = {"goal": goal, **{k: v or "" for k, v in match.groupdict().items()}}
                return [Action(tool=tool, args=_fill(args, names)) for tool, args in recipe.steps]
        known = ", ".join(r.name for r in self.recipes) or "none configured"
        raise PlannerError(f"no recipe matches the goal (recipes: {known}); "
                           "give explicit steps or add a [[recipes]] entry")
