"""Slack approval surface: Block Kit cards with Once / Session / Always / Deny buttons.

`SlackPlatform` implements `signoff.bot.ports.Surface` in socket or http mode; `blocks`
renders cards; `PLUGIN` registers the surface (entry point ``signoff.surfaces``). The
Slack SDKs are imported only inside this package, and only once a platform is built:
loading the plug-in with the config file imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters.slack.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.slack.platform import SlackPlatform

__all__ = ["PLUGIN", "SlackPlatform"]


def __getattr__(name: str) -> object:
    # `from signoff.adapters.slack import SlackPlatform` keeps working, SDK and all.
    if name == "SlackPlatform":
        from signoff.adapters.slack.platform import SlackPlatform

        return SlackPlatform
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
