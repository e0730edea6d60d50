"""Time as a port, so expiry, escalation and rotations are testable without sleeping."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Where the runtime and the bot get the current time."""

    def now(self) -> datetime:
        """The current aware UTC time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """Wall-clock time in UTC."""
        return system_now()


def system_now() -> datetime:
    """Wall-clock time in UTC: the one place that reads it.

    Only for what has no node (a CLI's "now", defaults of values built outside the
    engine); the runtime and the bot always ask their injected Clock.
    """
    return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
        self._moved = asyncio.Event()

    def now(self) -> datetime:
        """The fake current time."""
        return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        """Move forward by a timedelta or a number of seconds."""
        self._now += delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to an exact time."""
        self._now = when
