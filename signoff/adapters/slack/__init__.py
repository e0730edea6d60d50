"""Slack approval surface: Block Kit cards with Once / Session / Always / Deny buttons.

`SlackSurface` implements `signoff.bot.ports.Surface` in socket or http mode; `blocks`
renders cards; `PLUGIN` registers the surface (entry point ``signoff.surfaces``). The
Slack SDKs are imported only inside this package, and only once a surface is built:
loading the plug-in with the config file imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters.slack.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.slack.surface import SlackSurface

__all__ = ["PLUGIN", "SlackSurface"]


def __getattr__(name: str) -> object:
    # `from signoff.adapters.slack import SlackSurface` keeps working, SDK and all.
    if name == "SlackSurface":
        from signoff.adapters.slack.surface import SlackSurface

        return SlackSurface
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
