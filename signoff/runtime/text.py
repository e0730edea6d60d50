"""Plain-text helpers shared by tools, cards and notifications."""

from __future__ import annotations

import json

SHORT = 120


def shorten(value: object, limit: int = SHORT) -> str:
    """One line, at most ``limit`` characters, with an ellipsis when cut."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
