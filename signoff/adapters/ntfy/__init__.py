"""The ntfy surface: approval cards as ntfy messages whose buttons decide."""

from __future__ import annotations

from signoff.adapters.ntfy.plugin import PLUGIN

__all__ = ["PLUGIN"]
