"""Waiting for a decision without polling the store per waiter: in-process wake-ups.

`GET /v1/approvals/{id}?wait=30s` parks on an `asyncio.Event` of its own; the `Decider`
fires every event of a request right after it commits a decision or an expiry, handing
over the committed request, so a waiter on the node that took the decision answers at once
without reading it back. A decision taken on another
node (several daemons on one database) fires nothing here, so one shared re-check per
watch reads the statuses of every waited request in one store call each ``recheck``
seconds while anyone waits, and fires those that are settled: 10,000 parked long polls
cost one read a second, not 10,000, and a waiter costs no task, thread or loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection

from signoff.runtime.models import Approval, ApprovalStatus

log = logging.getLogger(__name__)

Reader = Callable[[str], Awaitable[Approval | None]]
# The statuses of the given requests (an id missing from the answer is not stored).
StatusReader = Callable[[Collection[str]], Awaitable[dict[str, ApprovalStatus]]]


class ApprovalWatch:
    """Wake-ups for long polls, keyed by approval id.

    ``states`` is the store's `approval_states`; without it (a watch with no store) only
    `fire` wakes a waiter, and ``seconds`` still bounds every wait.
    """

    def __init__(self, *, recheck: float = 1.0, states: StatusReader | None = None) -> None:
        self.recheck = recheck
        self._states = states
        self._events: dict[str, set[asyncio.Event]] = {}
        self._answers: dict[str, Approval] = {}  # final requests fired while awaited
        self._checker: asyncio.Task[None] | None = None

    def fire(self, approval_id: str, approval: Approval | None = None) -> None:
        """A request was decided (or expired): wake everyone waiting for it. ``approval``,
        the request as just committed, is their answer when it is final, so a thousand
        waiters of one request do not make a thousand reads of it."""
        events = self._events.get(approval_id)
        if not events:
            return
        if approval is not None and approval.status.final:
            self._answers[approval_id] = approval.model_copy(deep=True)
        for event in events:
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
        # Registered before the first read: a decision committed after it sets the event.
        self._events.setdefault(approval_id, set()).add(event)
        try:
            while True:
                # Cleared before the read: a decision landing between the read and the
                # wait leaves the event set, so the next wait returns at once.
                event.clear()
                approval = self._answers.get(approval_id) or await read(approval_id)
                remaining = end - loop.time()
                # A held request is approved but may still be undone: wait for its end.
                if approval is None or approval.status.final or remaining <= 0:
                    return approval
                # A parked waiter keeps no copy of its request: thousands of them add up.
                del approval
                self._start_checker()
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await event.wait()
        finally:
            self._leave(approval_id, event)

    def _leave(self, approval_id: str, event: asyncio.Event) -> None:
        events = self._events.get(approval_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._events[approval_id]
                self._answers.pop(approval_id, None)
        if not self._events and self._checker is not None:
            # Nobody waits: the re-check ends now rather than outliving its loop.
            self._checker.cancel()
            self._checker = None

    def _start_checker(self) -> None:
        if self._states is not None and (self._checker is None or self._checker.done()):
            self._checker = asyncio.create_task(self._recheck(self._states),
                                                name="approval-watch-recheck")

    async def _recheck(self, states: StatusReader) -> None:
        """Every ``recheck`` seconds while anyone waits: one read for all waited ids."""
        while self._events:
            await asyncio.sleep(self.recheck)
            ids = list(self._events)
            if not ids:
                break
            try:
                found = await states(ids)
            except Exception:  # a failed read (database away) must not end the re-check
                log.warning("approval_watch_recheck_failed", exc_info=True)
                continue
            for approval_id in ids:
                status = found.get(approval_id)
                if status is None or status.final:
                    self.fire(approval_id)
