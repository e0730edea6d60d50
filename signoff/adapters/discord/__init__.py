"""The Discord approval surface: cards with buttons in a channel, clicks over HTTP.

`PLUGIN` registers the surface (entry point ``signoff.surfaces``). Nothing of the
surface (httpx client, Ed25519) is imported until a surface is built: loading the
plug-in with the config file imports only its settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters import lazy_surface
from signoff.adapters.discord.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.discord.surface import DiscordSurface

__all__ = ["PLUGIN", "DiscordSurface"]

__getattr__ = lazy_surface(__name__, "DiscordSurface")
