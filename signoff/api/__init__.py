"""The HTTP API and web console app."""

from __future__ import annotations

from signoff.api.app import create_app
from signoff.api.context import ApiContext
from signoff.api.metrics import MetricsListener

__all__ = ["ApiContext", "MetricsListener", "create_app"]
