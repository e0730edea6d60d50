"""The Microsoft Teams approval surface: Adaptive Cards with Action.Execute buttons.

`PLUGIN` registers the surface (entry point ``signoff.surfaces``). Loading the plug-in with
the config file imports only the section model; the platform (JWT checks, the connector
client) is imported once a surface is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters.teams.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.teams.platform import TeamsPlatform

__all__ = ["PLUGIN", "TeamsPlatform"]


def __getattr__(name: str) -> object:
    if name == "TeamsPlatform":
        from signoff.adapters.teams.platform import TeamsPlatform

        return TeamsPlatform
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
