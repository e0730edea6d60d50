"""The e-mail surface: approval cards as mails whose links open a confirmation page."""

from __future__ import annotations

from signoff.adapters.email.plugin import PLUGIN

__all__ = ["PLUGIN"]
