"""The Microsoft Teams approval surface: Adaptive Cards with Action.Execute buttons.

`PLUGIN` registers the surface (entry point ``signoff.surfaces``). Loading the plug-in with
the config file imports only the section model; the surface (JWT checks, the connector
client) is imported once a surface is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters import lazy_surface
from signoff.adapters.teams.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.teams.surface import TeamsSurface

__all__ = ["PLUGIN", "TeamsSurface"]

__getattr__ = lazy_surface(__name__, "TeamsSurface")
