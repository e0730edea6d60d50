"""The Telegram approval surface: cards with inline buttons, taps and text commands.

`PLUGIN` registers the surface (entry point ``signoff.surfaces``). The python-telegram-bot
SDK is imported only inside this package, and only once a surface is built: loading the
plug-in with the config file imports none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.adapters import lazy_surface
from signoff.adapters.telegram.plugin import PLUGIN

if TYPE_CHECKING:
    from signoff.adapters.telegram.surface import TelegramSurface

__all__ = ["PLUGIN", "TelegramSurface"]

__getattr__ = lazy_surface(__name__, "TelegramSurface")
