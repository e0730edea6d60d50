"""The Telegram approval surface: cards with inline buttons, taps and text commands.

The python-telegram-bot SDK is imported only inside this package.
"""

from __future__ import annotations

from signoff.adapters.telegram.platform import TelegramPlatform

__all__ = ["TelegramPlatform"]
