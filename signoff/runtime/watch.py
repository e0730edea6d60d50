"""Waiting for a decision without polling the store: in-process wake-ups per request.

`GET /v1/approvals/{id}?wait=30s` parks on an `asyncio.Event` of its own; the `Decider`
fires every event of a request right after it commits a decision or an expiry, so a
waiter on the node that took the decision answers at once. A decision taken on another
node (several daemons on one database) fires nothing here, so a waiter also re-reads
the store every ``recheck`` seconds: slow, but bounded, and never a busy loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from signoff.runtime.models import Approval

Reader = Callable[[str], Awaitable[Approval | None]]


class ApprovalWatch:
    """Wake-ups for long polls, keyed by approval id."""

    def __init__(self, *, recheck: float = 1.0) -> None:
        self.recheck = recheck
        self._events: dict[str, set[asyncio.Event]] = {}

    def fire(self, approval_id: str) -> None:
        """A request was decided (or expired): wake everyone waiting for it."""
        for event in self._events.get(approval_id, ()):
            event.set()

    @property
    def waiting(self) -> int:
        """How many long polls are parked right now."""
        return sum(len(events) for events in self._events.values())

    async def wait_decided(self, approval_id: str, read: Reader,
                           seconds: float) -> Approval | None:
        """The request once it is no longer pending, or as it is after ``seconds``.

        ``seconds`` is a real-time bound on the wait, like a socket timeout; none of the
        product's own times (expiry, decisions) are read from it.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + max(seconds, 0.0)
        event = asyncio.Event()
        self._events.setdefault(approval_id, set()).add(event)
        try:
            while True:
                # Cleared before the read: a decision landing between the read and the
                # wait leaves the event set, so the next wait returns at once.
                event.clear()
                approval = await read(approval_id)
                remaining = end - loop.time()
                # A held request is approved but may still be undone: wait for its end.
                if (approval is None or approval.status.final
                        or remaining <= 0):
                    return approval
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, self.recheck)):
                        await event.wait()
        finally:
            events = self._events.get(approval_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._events[approval_id]
