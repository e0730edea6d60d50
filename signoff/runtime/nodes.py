"""The node registry: each daemon says every few seconds that it is alive and how busy.

A node writes its row (id, host, started_at, last_beat, running) every ``interval`` from
its own Clock, plus ``live_until = last_beat + LIVE_BEATS × interval``. A reader calls a
node live while ``live_until`` is after the reader's own Clock, so:

* liveness never compares a database server's timestamp with a node's (the server may
  be on another host, and the test suite shifts only our processes' clocks);
* every node carries its own window, so nodes with different heartbeat settings agree;
* a killed node drops out of `signoff nodes` and ``/health`` at most ``LIVE_BEATS``
  beats after its last one; a node stopped cleanly removes its row at once.

Nodes on different hosts must keep their clocks in sync (NTP) for this to be exact; a
skew shortens or lengthens the window by that much and changes nothing else (claims and
leases never depend on the registry).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from signoff.runtime.clock import Clock
from signoff.runtime.outages import Backoff, Outages, periodic
from signoff.runtime.store.port import NodeRecord, TaskStore

log = logging.getLogger(__name__)

LIVE_BEATS = 3  # a node is live for this many heartbeat intervals after its last beat
FORGET_AFTER = timedelta(days=1)  # rows of nodes dead this long are deleted by any beat


class Heartbeat:
    """A daemon service: writes this node's registry row until cancelled."""

    def __init__(self, *, store: TaskStore, clock: Clock, node_id: str, host: str,
                 interval: timedelta, running: Callable[[], int],
                 outages: Outages | None = None) -> None:
        self.store = store
        self.clock = clock
        self.node_id = node_id
        self.host = host
        self.interval = interval
        self.running = running  # e.g. the worker's count of tasks in hand
        self.started_at: datetime | None = None
        # A beat is a write: the one that works after an outage is what ends it.
        self.outages = outages or Outages(clock)

    def record(self) -> NodeRecord:
        """This node's row as of now."""
        now = self.clock.now()
        started = self.started_at or now
        return NodeRecord(id=self.node_id, host=self.host, started_at=started, last_beat=now,
                          live_until=now + LIVE_BEATS * self.interval, running=self.running())

    async def beat(self) -> None:
        """Write one beat."""
        row = self.record()
        await self.store.beat(row, forget_before=row.last_beat - FORGET_AFTER)
        self.outages.database_ok()

    async def run(self) -> None:
        """Beat every ``interval``; on cancellation (shutdown) remove the row."""
        self.started_at = self.clock.now()
        log.info("node_registered", extra={"node": self.node_id, "host": self.host})
        try:
            # While the database is away a beat is retried sooner than every interval (a
            # jittered back-off up to one interval), so that its return is seen quickly.
            every = self.interval.total_seconds()
            await periodic("heartbeat", self.beat, every=every, outages=self.outages,
                           backoff=Backoff(first=min(0.2, every), maximum=every))
        finally:
            try:
                await self.store.leave(self.node_id)
            except Exception as exc:  # the row then simply runs out of its window
                log.warning("node_leave_failed", extra={"node": self.node_id,
                                                        "error": str(exc)})
