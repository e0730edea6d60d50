"""The web console surface: cards as HTML, decisions by form post, live updates.

No SDK and no framework: pages are rendered by pure functions in `pages.py`; the HTTP
routes live in `signoff.api.console`. `PLUGIN` registers the surface (entry point
``signoff.surfaces``); every daemon builds it.
"""

from __future__ import annotations

from signoff.adapters.web.plugin import PLUGIN
from signoff.adapters.web.surface import WebSurface

__all__ = ["PLUGIN", "WebSurface"]
