"""The terminal approval surface used by `signoff handle` (`PLUGIN` registers it)."""

from __future__ import annotations

from signoff.adapters.terminal.plugin import PLUGIN

__all__ = ["PLUGIN"]
