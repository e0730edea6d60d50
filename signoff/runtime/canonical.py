"""Canonical JSON and hashing: one spelling per value, so equal values hash equally.

Fingerprints, grant keys and the audit hash chain all hash JSON. Two dicts with the same
content must give the same bytes whatever their key order or the platform, so keys are
sorted, separators carry no whitespace and non-ASCII text stays as is (UTF-8), which keeps
the hash independent of how a JSON library chooses to escape.
"""

from __future__ import annotations

import enum
import hashlib
import json
from datetime import date, datetime
from pathlib import PurePath
from typing import Any


def _default(value: Any) -> Any:
    """Spell the few non-JSON values the runtime hashes; anything else is a bug, so raise."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, PurePath):
        return value.as_posix()
    if isinstance(value, set | frozenset):
        # Sets have no order; sorting their canonical spellings gives them one.
        return sorted(value, key=canonical_json)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# One encoder for every call: json.dumps with options builds a new one each time, a
# quarter of hashing a small action (fingerprints are taken on every POST /tasks step).
# It holds only its options, so threads may share it.
_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,  # NaN/Infinity are not JSON; other parsers would reject the text
    default=_default,
)


def canonical_json(obj: Any) -> str:
    """Return the canonical JSON text of ``obj`` (sorted keys, compact, UTF-8, no NaN)."""
    return _ENCODER.encode(obj)


def sha256_hex(text: str | bytes) -> str:
    """Return the SHA-256 hex digest of ``text`` (str is encoded as UTF-8)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()
