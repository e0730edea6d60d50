"""signoff: approval-gated autonomy for agents and scheduled jobs.

``from signoff import Agent, Action, RiskClass, Planner``; plug-in authors import from
`signoff.plugin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from signoff._version import __version__
from signoff.runtime.models import Action, RiskClass
from signoff.runtime.planning.planner import Planner

if TYPE_CHECKING:
    from signoff.embed import Agent

__all__ = ["Action", "Agent", "Planner", "RiskClass", "__version__"]


def __getattr__(name: str) -> Any:
    # Agent pulls in the whole stack (config, store, flow); import it only when asked.
    if name == "Agent":
        from signoff.embed import Agent

        return Agent
    raise AttributeError(name)
