"""The web console surface: cards as HTML, decisions by form post, live updates.

No SDK and no framework: pages are rendered by pure functions in `pages.py`; the HTTP
routes live in `signoff.api.console`.
"""

from __future__ import annotations

from signoff.adapters.web.platform import WebPlatform

__all__ = ["WebPlatform"]
