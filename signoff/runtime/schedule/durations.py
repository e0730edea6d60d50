"""Human-friendly durations: ``"30s"``, ``"15m"``, ``"1h30m"``, ``"500ms"``, ``"1w"``.

Config files, the CLI and chat messages all speak this one format so that a user never has
to guess whether ``timeout = 30`` means seconds or minutes (a bare number means seconds).
Only the standard library is used: the runtime layer imports nothing above it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

__all__ = ["format_duration", "parse_duration"]

# Longest unit names first so that "ms" is not read as "m" followed by garbage.
_UNITS: dict[str, timedelta] = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}
_MICRO = timedelta(microseconds=1)
_PART = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_HINT = "(use e.g. '30s', '15m', '2h')"


def _invalid(text: object) -> ValueError:
    return ValueError(f"invalid duration {text!r} {_HINT}")


def parse_duration(text: str | float) -> timedelta:
    """Parse ``text`` into a non-negative :class:`~datetime.timedelta`.

    Accepts one or more ``<number><unit>`` parts (units ms, s, m, h, d, w; e.g. ``"1h30m"``,
    ``"1.5h"``) or a plain number of seconds (``"90"``, ``90``, ``2.5``). Raises
    :class:`ValueError` with a message that shows the accepted forms.
    """
    # bool is an int subclass; `timeout = true` is a mistake, not one second.
    if isinstance(text, bool):
        raise _invalid(text)
    if isinstance(text, int | float):
        if not math.isfinite(text) or text < 0:
            raise _invalid(text)
        return timedelta(seconds=text)
    if not isinstance(text, str):
        raise _invalid(text)
    value = text.strip()
    if not value:
        raise ValueError(f"invalid duration {text!r}: empty {_HINT}")
    if _NUMBER.fullmatch(value):
        return timedelta(seconds=float(value))
    total = timedelta()
    pos = 0
    for part in _PART.finditer(value):
        # finditer skips unmatched text; a gap between parts means junk like "1x2m".
        if part.start() != pos:
            raise _invalid(text)
        total += float(part.group(1)) * _UNITS[part.group(2).lower()]
        pos = part.end()
    if pos == 0 or pos != len(value):
        raise _invalid(text)
    return total


def format_duration(td: timedelta) -> str:
    """Render ``td`` compactly, the inverse of :func:`parse_duration` (``"1h30m"``, ``"0s"``)."""
    micros = td // _MICRO
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    parts: list[str] = []
    for unit in ("w", "d", "h", "m", "s"):
        count, micros = divmod(micros, _UNITS[unit] // _MICRO)
        if count:
            parts.append(f"{count}{unit}")
    if micros:
        # What is left is under a second; ms with a fraction ("1.5ms") parses back exactly.
        parts.append(f"{micros / 1000:g}ms")
    return sign + "".join(parts)
