"""The Microsoft Teams approval surface: Adaptive Cards with Action.Execute buttons.

`PLUGIN` registers the surface (entry point ``signoff.surfaces``). Loading the plug-in with
the config file imports only the section model; the surface (JWT checks, the connector
client) is imported once a surface is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters.teams.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.teams.surface import TeamsSurface

__all__ = ["PLUGIN", "TeamsSurface"]


def __getattr__(name: str) -> object:
    if name == "TeamsSurface":
        from signoff.adapters.teams.surface import TeamsSurface

        return TeamsSurface
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
