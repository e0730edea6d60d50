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
mode, where nothing needs a leader) and `signoff.runtime.store.sql.leader.PgLeadership`
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


@dataclass
class Lease:
    """This node leads ``name`` until `lost` is set (or the `hold` block ends)."""

    name: str
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_lost(self) -> None:
        """Return when the leadership is lost (never, for a sole node)."""
        await self.lost.wait()


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
