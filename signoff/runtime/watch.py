"""Waiting for a decision without polling the store per waiter: in-process wake-ups.

`GET /v1/approvals/{id}?wait=30s` parks on one future in a registry keyed by request id
(`wait_until`); the `Decider` fires every future of a request right after it commits a
decision or an expiry, handing over the committed request, so a waiter on the node that
took the decision answers at once without reading it back. A decision taken on another
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
from typing import TypeVar

from signoff.runtime.models import Approval, ApprovalStatus

log = logging.getLogger(__name__)

Reader = Callable[[str], Awaitable[Approval | None]]
# The statuses of the given requests (an id missing from the answer is not stored).
StatusReader = Callable[[Collection[str]], Awaitable[dict[str, ApprovalStatus]]]
T = TypeVar("T")
# One look at a waited request: given the request a local decision committed (or None),
# what the wait would answer now, and whether that is final.
Look = Callable[[Approval | None], Awaitable[tuple[T, bool]]]


class ApprovalWatch:
    """Wake-ups for long polls, keyed by approval id.

    ``states`` is the store's `approval_states`; without it (a watch with no store) only
    `fire` wakes a waiter, and ``seconds`` still bounds every wait.
    """

    def __init__(self, *, recheck: float = 1.0, states: StatusReader | None = None) -> None:
        self.recheck = recheck
        self._states = states
        self._events: dict[str, set[asyncio.Future[None]]] = {}
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
        for wake in events:
            if not wake.done():
                wake.set_result(None)

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
        async def look(answer: Approval | None) -> tuple[Approval | None, bool]:
            approval = answer or await read(approval_id)
            # A held request is approved but may still be undone: wait for its end.
            return approval, approval is None or approval.status.final

        return await self.wait_until(approval_id, look, seconds)

    async def wait_until(self, approval_id: str, look: Look[T], seconds: float) -> T:
        """``look``'s answer once it says it is settled, or its last one after ``seconds``.

        ``look`` is handed the request as committed when a decision on this node woke the
        wait (None otherwise: it reads for itself) and answers (what to return, settled?).
        Between looks the wait holds one future in the shared registry and nothing else:
        no task, thread or loop of its own, and no copy of what ``look`` returned.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + max(seconds, 0.0)
        answer: Approval | None = None
        while True:
            # Registered before the look: a decision committed during it wakes the wait
            # below at once instead of being missed.
            wake = loop.create_future()
            self._events.setdefault(approval_id, set()).add(wake)
            try:
                result, settled = await look(answer)
                remaining = end - loop.time()
                if settled or remaining <= 0:
                    return result
                del result  # thousands of parked waiters: keep nothing but the future
                self._start_checker()
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await wake
                answer = self._answers.get(approval_id)
            finally:
                self._leave(approval_id, wake)

    def _leave(self, approval_id: str, wake: asyncio.Future[None]) -> None:
        events = self._events.get(approval_id)
        if events is not None:
            events.discard(wake)
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
