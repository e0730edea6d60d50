"""LISTEN/NOTIFY wake-ups between nodes sharing one PostgreSQL.

A task insert notifies channel ``signoff_tasks`` (in its own transaction on the SQL
store, see `store/sql/writes.py`; just after the commit on `PgTaskStore`, see `store.py`), so the
notification never announces a task that is not there. Every node listens on one
dedicated psycopg connection, outside the store's pool (a pooled connection would be
handed to other work and lose its LISTEN), and wakes its worker on each notification —
except its own: the payload is the sending store's `wakeup_sender`, and a node that
queued a task has already woken its own worker (the API and the scheduler do), so its
own echo would only make every idle consumer look at the queue a second time.

Polling stays the fallback: when the listening connection fails, the worker still looks
at the queue every ``daemon.poll_interval`` while this service reconnects with
exponential backoff, logging ``notify_listen_lost`` and ``notify_listening``. A
connection that died silently (no FIN from a vanished server) is found by a ping after
each quiet ``PING_AFTER`` seconds. After every (re)connect the worker is woken once,
for whatever was submitted while nobody listened. While the connection is down the
node's `Outages` names it (problem ``listen`` in ``/health``, status ``degraded``) until
LISTEN is in place again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from signoff.runtime.outages import Backoff, Outages
from signoff.runtime.store.sql.writes import CHANNEL

PING_AFTER = 30.0  # seconds without a notification before the connection is checked
PING_TIMEOUT = 10.0
APPLICATION_NAME = "signoff-listen"
PROBLEM = "listen"  # its name among the node's problems (/health)

log = logging.getLogger(__name__)


def libpq_url(url: str) -> str:
    """The libpq URI of a SQLAlchemy ``postgresql+driver://`` URL (password kept)."""
    parsed = sa.engine.make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


class TaskWakeups:
    """A daemon service: calls ``wake`` whenever a task is queued on the database, but
    for the wake-ups whose payload is ``ignore`` (the node's own store's)."""

    def __init__(self, *, url: str, wake: Callable[[], None], first_backoff: float = 0.5,
                 max_backoff: float = 30.0, ignore: str | None = None,
                 outages: Outages | None = None) -> None:
        self.conninfo = libpq_url(url)
        self.wake = wake
        self.ignore = ignore  # this node's own store's wakeup_sender: its echo is skipped
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.connected = asyncio.Event()  # set while LISTEN is in place (for tests)
        self.backend_pid: int | None = None
        self.outages = outages  # told while LISTEN is down, and when it is back

    async def run(self) -> None:
        """Listen until cancelled, reconnecting with backoff."""
        try:
            import psycopg
        except ImportError:
            log.warning("notify_unavailable", extra={"reason": "psycopg is not installed; "
                                                     "idle nodes poll the queue"})
            return
        backoff = Backoff(first=self.first_backoff, maximum=self.max_backoff)
        while True:
            try:
                await self._listen(psycopg)
            except (psycopg.Error, OSError, TimeoutError) as exc:
                was_up = self.connected.is_set()
                if was_up:
                    backoff.reset()  # it worked until now: start the backoff over
                delay = backoff.next()
                log.warning("notify_listen_lost" if was_up else "notify_listen_failed",
                            extra={"error": _first_line(exc), "retry_in": f"{delay:.2g}s"})
                if self.outages is not None:
                    self.outages.report(PROBLEM, "LISTEN connection down, reconnecting "
                                        f"(idle nodes poll meanwhile): {_first_line(exc)}")
            finally:
                self.connected.clear()
                self.backend_pid = None
            await asyncio.sleep(delay)

    async def _listen(self, psycopg: Any) -> None:
        # Named, so that an operator sees it in pg_stat_activity for what it is.
        conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                     connect_timeout=10,
                                                     application_name=APPLICATION_NAME)
        async with conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            self.backend_pid = conn.info.backend_pid
            self.connected.set()
            log.info("notify_listening", extra={"channel": CHANNEL})
            if self.outages is not None:
                self.outages.recovered(PROBLEM)
            self.wake()  # anything submitted while nobody listened
            while True:
                async for note in conn.notifies(timeout=PING_AFTER):
                    if self.ignore is None or note.payload != self.ignore:
                        self.wake()
                async with asyncio.timeout(PING_TIMEOUT):
                    await conn.execute("SELECT 1")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
