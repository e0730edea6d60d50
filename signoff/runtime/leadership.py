"""Leadership: one node of a cluster at a time does what only one may do.

Telegram's Bot API allows a single ``getUpdates`` consumer per bot token (a second gets
409 Conflict), so of several daemons sharing a database exactly one long-polls; the
others still post and edit cards (sending is fine from any node). A surface asks the
daemon's `Leadership` port for a named lease and does the led work only while it holds
it::

    async with leadership.hold("telegram-polling") as lease:
        start_polling()
        await lease.wait_lost()   # the database connection behind it is gone
        stop_polling()

`hold` waits as long as another node leads, and returns once this node leads. A lease
can be lost (the connection behind it broke): the holder must then stop the led work at
once — another node may already have taken over — and ask again.

Implementations: `SoleLeadership` (one node: SQLite, the in-memory store, or webhook
mode, where nothing needs a leader) and `signoff.runtime.store.postgres.leader.PgLeadership`
(a PostgreSQL session-level advisory lock on a dedicated connection).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """This node no longer leads: the led work must stop."""


@dataclass
class Lease:
    """This node leads ``name`` until `lost` is set (or the `hold` block ends).

    ``fresh_for``: how long one confirmation that the lease is still held (`confirm`, by
    the implementation's watcher) may be relied on. Before each led act (a getUpdates)
    the holder awaits `fence`: after a pause longer than that (a node frozen by SIGSTOP,
    a VM suspended, a starved event loop) it waits for the watcher's next word instead
    of acting on a lease another node may have taken meanwhile.
    """

    name: str
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    fresh_for: float = float("inf")
    _confirmed_at: float = field(default_factory=lambda: _now())  # noqa: PLW0108 - defined below
    _news: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_lost(self) -> None:
        """Return when the leadership is lost (never, for a sole node)."""
        await self.lost.wait()

    def confirm(self) -> None:
        """The lease was seen held just now."""
        self._confirmed_at = _now()
        self._news.set()

    def mark_lost(self) -> None:
        """The lease is gone (or may be): stop the led work."""
        self.lost.set()
        self._news.set()

    def fresh(self) -> bool:
        """Held, and confirmed recently enough to act on."""
        return not self.lost.is_set() and _now() - self._confirmed_at <= self.fresh_for

    async def fence(self) -> None:
        """Return once acting is safe; raise `LeaseLost` when the lease is gone."""
        while not self.fresh():
            if self.lost.is_set():
                raise LeaseLost(f"this node no longer holds the {self.name!r} lease")
            self._news.clear()
            await self._news.wait()


def _now() -> float:
    # The event loop's monotonic clock: a local duration, never compared across nodes,
    # and it runs on through a SIGSTOP (which is exactly what must be noticed).
    return asyncio.get_running_loop().time()


@runtime_checkable
class Leadership(Protocol):
    """Hands out named leases: at most one node of a cluster holds each name."""

    def hold(self, name: str) -> AbstractAsyncContextManager[Lease]:
        """Wait until this node leads ``name``; release the lease when the block ends."""
        ...


class SoleLeadership:
    """One node and no one to share with: always the leader, never losing it."""

    def __init__(self, *, node_id: str = "") -> None:
        self.node_id = node_id

    @asynccontextmanager
    async def _hold(self, name: str) -> AsyncIterator[Lease]:
        log.info("leadership_acquired", extra={"lease": name, "node": self.node_id,
                                               "how": "sole node"})
        yield Lease(name)

    def hold(self, name: str) -> AbstractAsyncContextManager[Lease]:
        """Lead at once."""
        return self._hold(name)
