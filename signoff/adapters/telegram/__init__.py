"""The Telegram approval surface: cards with inline buttons, taps and text commands.

`PLUGIN` registers the surface (entry point ``signoff.surfaces``). The python-telegram-bot
SDK is imported only inside this package, and only once a surface is built: loading the
plug-in with the config file imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters.telegram.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.telegram.surface import TelegramSurface

__all__ = ["PLUGIN", "TelegramSurface"]


def __getattr__(name: str) -> object:
    # `from signoff.adapters.telegram import TelegramSurface` keeps working, SDK and all.
    if name == "TelegramSurface":
        from signoff.adapters.telegram.surface import TelegramSurface

        return TelegramSurface
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
