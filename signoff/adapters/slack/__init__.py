"""Slack approval surface: Block Kit cards with Once / Session / Always / Deny buttons.

`SlackSurface` implements `signoff.bot.ports.Surface` in socket or http mode; `blocks`
renders cards; `PLUGIN` registers the surface (entry point ``signoff.surfaces``). The
Slack SDKs are imported only inside this package, and only once a surface is built:
loading the plug-in with the config file imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters import lazy_surface
from signoff.adapters.slack.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.slack.surface import SlackSurface

__all__ = ["PLUGIN", "SlackSurface"]

__getattr__ = lazy_surface(__name__, "SlackSurface")
