"""`PgLeadership`: named leases as PostgreSQL session-level advisory locks.

Each `hold` opens its own psycopg connection, outside the store's pool (a pooled
connection would be handed to other work, and a session lock lives exactly as long as
its session), and tries ``pg_try_advisory_lock(key)`` every ``retry`` seconds until it
gets it. Holding it, the node pings the connection every ``ping`` seconds; a failed or
slow ping means the session, and so possibly the lock, is gone: the lease is marked
lost at once and the holder stops the led work.

How fast a dead leader is replaced:

* killed (kill -9, a crash): the kernel closes its socket, PostgreSQL ends the session
  and frees the lock at once; the next standby try (``retry``, 1 s) takes over;
* vanished (host or network gone, no FIN): the server ends the silent session after
  ``idle_session_timeout`` (set on the session to `IDLE_LIMIT`, well above the ping
  interval, so a live leader is never cut off), then a standby takes over; the old
  leader's own ping fails within ``ping + PING_TIMEOUT`` and it stops leading.

While a lease is lost, or this node cannot reach the database to lead or stand by, the
node's `Outages` names it (problem ``leadership <name>`` in ``/health``); it is cleared
once the node leads again or knows that another node does (standby).

The lock key is the first 8 bytes of SHA-256 of ``signoff:<name>``, a signed bigint the
same on every node. The session's ``application_name`` is ``signoff-lead:<node id>`` so
that an operator can tell in ``pg_stat_activity`` (joined with ``pg_locks``) who leads.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from signoff.runtime.leadership import Lease
from signoff.runtime.outages import Backoff, Outages
from signoff.runtime.store.postgres.notify import libpq_url

log = logging.getLogger(__name__)

APPLICATION_PREFIX = "signoff-lead:"
IDLE_LIMIT = "8s"  # the server ends a leader session silent this long (a vanished host)
PING_TIMEOUT = 3.0


def lock_key(name: str) -> int:
    """The advisory lock key of a lease name (a signed 64-bit integer)."""
    digest = hashlib.sha256(f"signoff:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PgLeadership:
    """Leases on one PostgreSQL database (a `signoff.runtime.leadership.Leadership`)."""

    def __init__(self, *, url: str, node_id: str, retry: float = 1.0, ping: float = 2.0,
                 max_backoff: float = 10.0, outages: Outages | None = None) -> None:
        self.conninfo = libpq_url(url)
        self.node_id = node_id
        self.retry = retry
        self.ping = ping
        self.max_backoff = max_backoff
        self.outages = outages  # told of lost leases (the daemon's engine's: /health)

    def hold(self, name: str) -> AbstractAsyncContextManager[Lease]:
        """Wait until this node holds the advisory lock of ``name``."""
        return self._hold(name)

    @asynccontextmanager
    async def _hold(self, name: str) -> AsyncIterator[Lease]:
        import psycopg

        conn = await self._acquire(psycopg, name)
        # A confirmation holds for less than the server's idle limit: after a pause the
        # session, and the lock with it, may be gone (see `Lease.fence`).
        lease = Lease(name, fresh_for=self.ping + PING_TIMEOUT)
        log.info("leadership_acquired", extra={"lease": name, "node": self.node_id,
                                               "backend_pid": conn.info.backend_pid})
        watch = asyncio.create_task(self._watch(psycopg, conn, lease),
                                    name=f"lease-watch-{name}")
        try:
            yield lease
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            lost = lease.lost.is_set()
            try:
                await conn.close()  # ends the session: the lock goes with it
            except (psycopg.Error, OSError):
                pass
            if not lost:
                log.info("leadership_released", extra={"lease": name, "node": self.node_id})

    async def _acquire(self, psycopg: Any, name: str) -> Any:
        """A connection holding the lock; retries (and reconnects) until it does."""
        key = lock_key(name)
        backoff = Backoff(first=self.retry, maximum=self.max_backoff)
        standby_logged = False
        while True:
            conn = None
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, connect_timeout=10,
                    application_name=f"{APPLICATION_PREFIX}{self.node_id}"[:63])
                await conn.execute(f"SET idle_session_timeout = '{IDLE_LIMIT}'")
                backoff.reset()
                while True:
                    async with asyncio.timeout(PING_TIMEOUT):
                        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                        row = await cur.fetchone()
                    self._settled(name)  # leading or standing by: nothing is wrong
                    if row is not None and row[0]:
                        return conn
                    if not standby_logged:
                        log.info("leadership_standby", extra={"lease": name,
                                                              "node": self.node_id})
                        standby_logged = True
                    await asyncio.sleep(self.retry)
            except (psycopg.Error, OSError, TimeoutError) as exc:
                delay = backoff.next()  # jittered: standbys cut off together spread out
                log.warning("leadership_connect_failed",
                            extra={"lease": name, "error": _first_line(exc),
                                   "retry_in": f"{delay:.2g}s"})
                self._problem(name, f"cannot lead or stand by, retrying: {_first_line(exc)}")
                if conn is not None:
                    await _close_quietly(psycopg, conn)
                await asyncio.sleep(delay)
            except BaseException:
                if conn is not None:
                    await _close_quietly(psycopg, conn)
                raise

    async def _watch(self, psycopg: Any, conn: Any, lease: Lease) -> None:
        """Ping until the session fails; then the lease is lost."""
        try:
            while True:
                await asyncio.sleep(self.ping)
                async with asyncio.timeout(PING_TIMEOUT):
                    await conn.execute("SELECT 1")
                lease.confirm()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("leadership_lost", extra={"lease": lease.name, "node": self.node_id,
                                                  "error": _first_line(exc)})
            self._problem(lease.name, f"lease lost, re-acquiring: {_first_line(exc)}")
            lease.mark_lost()

    def _problem(self, name: str, text: str) -> None:
        if self.outages is not None:
            self.outages.report(f"leadership {name}", text)

    def _settled(self, name: str) -> None:
        if self.outages is not None and self.outages.recovered(f"leadership {name}"):
            log.info("leadership_settled", extra={"lease": name, "node": self.node_id})


async def _close_quietly(psycopg: Any, conn: Any) -> None:
    try:
        await conn.close()
    except (psycopg.Error, OSError):
        pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
