"""The replay ledger: "have we acted on this inbound request before?", for every node.

A platform may deliver one request twice: Slack retries an event it thinks was not
acknowledged, an attacker replays a captured signed request, Telegram hands a new
getUpdates consumer the updates a dead one had not confirmed. Whichever node of a
cluster receives a copy, it must be acted on once. A surface names each request by the
keys that identify it (``slack:sig:<ts>:<signature>``, ``slack:event:<event id>``,
``telegram:update:<update id>``) and asks `first_time`; the answer is True for exactly
one caller across the cluster while the keys are remembered.

Keys are kept for ``ttl`` (by the ledger's Clock, the node's) and then forgotten; a
request replayed after that must be refused by other means (Slack's 5-minute
timestamp window). Implementations: `MemoryReplayLedger` (one process: SQLite, the
in-memory store) and `signoff.runtime.store.postgres.replay.SqlReplayLedger` (a table with a
unique key, shared by every node on the database).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from signoff.runtime.clock import Clock

MEMORY_CAPACITY = 10_000


@runtime_checkable
class ReplayLedger(Protocol):
    """Remembers which inbound requests were acted on (see the module docstring)."""

    async def first_time(self, keys: Sequence[str], *, ttl: timedelta) -> bool:
        """Record ``keys`` for ``ttl``; False when any of them was recorded before and is
        still remembered (a replay)."""
        ...


class MemoryReplayLedger:
    """The ledger of one process: a bounded set with expiry, forgotten on restart."""

    def __init__(self, *, clock: Clock, capacity: int = MEMORY_CAPACITY) -> None:
        self.clock = clock
        self.capacity = capacity
        self._seen: dict[str, datetime] = {}
        self._expiry: list[tuple[datetime, str]] = []  # heap by expiry time

    def __len__(self) -> int:
        return len(self._seen)

    async def first_time(self, keys: Sequence[str], *, ttl: timedelta) -> bool:
        """Record ``keys``; False if one is already recorded (nothing new is then kept)."""
        now = self.clock.now()
        expires_at = now + ttl
        self._forget(now)
        if any(key in self._seen for key in keys):
            return False
        for key in keys:
            while len(self._seen) >= self.capacity:
                # Full of live keys: drop the one closest to expiry. Only a flood of
                # authentic requests gets here, and the oldest key is the least useful.
                _, oldest = heapq.heappop(self._expiry)
                self._seen.pop(oldest, None)
            self._seen[key] = expires_at
            heapq.heappush(self._expiry, (expires_at, key))
        return True

    def _forget(self, now: datetime) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            _, key = heapq.heappop(self._expiry)
            if self._seen.get(key) is not None and self._seen[key] <= now:
                del self._seen[key]
