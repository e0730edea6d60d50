"""People named at the end of a Telegram message, as mentions that notify them.

A Telegram user is addressed by id (``telegram:42``), which has no text form that pings
anyone; a ``text_mention`` entity on the name does. Entities count UTF-16 code units,
not characters (an emoji in the text before a name is two), hence `utf16`. Pure
functions: the platform turns each `Mention` into the SDK's entity.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from .handlers import SURFACE

_USER = re.compile(rf"{SURFACE}:(\d+)")


class Mention(NamedTuple):
    """A ``text_mention`` of Telegram user ``user_id`` over ``[offset, offset+length)``."""

    offset: int
    length: int
    user_id: int


def utf16(text: str) -> int:
    """The length of ``text`` as Telegram counts it."""
    return len(text.encode("utf-16-le")) // 2


def with_mentions(text: str, people: Sequence[str], limit: int) -> tuple[str, list[Mention]]:
    """``text`` followed by ``people`` (as `signoff.bot.ports.with_people` writes them),
    cut to ``limit`` characters, and a mention of each Telegram user still in it."""
    if not people:
        return text[:limit], []
    out, mentions = f"{text} ", []
    for i, key in enumerate(people):
        if i:
            out += ", "
        found = _USER.fullmatch(key)
        if found and len(out) + len(key) <= limit:
            mentions.append(Mention(utf16(out), utf16(key), int(found.group(1))))
        out += key
    return out[:limit], mentions
