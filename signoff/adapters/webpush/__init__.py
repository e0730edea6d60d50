"""The Web Push surface: approval cards as notifications on the console's installed PWA."""

from __future__ import annotations

from signoff.adapters.webpush.plugin import PLUGIN

__all__ = ["PLUGIN"]
