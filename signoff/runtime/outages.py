"""Outages: what is wrong with this node right now, and the loops that wait them out.

Every long-running loop of the daemon (the worker's claims, the expiry sweeper, the
heartbeat, a running task's lease, the scheduler, the outbox dispatcher, the reminder
and escalation ticks, the notification windows, the audit head's daily post, LISTEN,
leadership) and every service
(the HTTP server, each chat surface) runs under one of two helpers:

* `periodic(name, body, every=…)` runs ``body`` every ``every`` seconds (until it raises
  `Finished`); an exception from it (the database away, a bug) is logged once per
  outage, reported here, and the body is tried again after a jittered exponential
  `Backoff`, never taking the daemon down; its next success clears the report;
* `supervise(name, service)` restarts a service that died with the same back-off (a
  service that returns has finished on purpose and is not restarted).

`Outages` is what ``/health`` reads: a `StoreUnavailable` anywhere marks the database
down (``"status": "down"``, 503) until a write succeeds again (the heartbeat writes every
``daemon.heartbeat``); a loop or service that keeps failing for another reason makes the
node ``"degraded"``. ``daemon.db_outage_limit`` ends the daemon (exit code 3) when the
database has been away that long, for a supervisor such as systemd to act on.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from signoff.errors import SignoffError, StoreError, StoreUnavailable
from signoff.runtime.clock import Clock

log = logging.getLogger(__name__)

DATABASE = "database"
HEALTHY_AFTER = 30.0  # seconds a restarted service must run before its report is cleared


class OutageTooLong(SignoffError):
    """The database was unavailable for longer than daemon.db_outage_limit."""


class Backoff:
    """Jittered exponential delays: ``first``, doubling up to ``maximum``, each drawn
    between half and all of its step, so that nodes cut off together do not come back in
    lockstep (a thundering herd on a database that has just restarted)."""

    def __init__(self, first: float = 0.2, maximum: float = 10.0,
                 rng: Callable[[], float] = random.random) -> None:
        # Never a first delay past the maximum: a worker polling every two minutes would
        # otherwise wait up to a minute after an outage before it looks at the queue.
        self.first = min(first, maximum)
        self.maximum = maximum
        self.rng = rng
        self._step = self.first

    def next(self) -> float:
        """The delay before the next try."""
        step, self._step = self._step, min(self._step * 2, self.maximum)
        return step * (0.5 + self.rng() / 2)

    def reset(self) -> None:
        """Start over from ``first`` (the last try worked)."""
        self._step = self.first


@dataclass
class Problem:
    """One thing wrong: who reported it, the error's first line, and since when."""

    name: str
    error: str
    since: datetime

    def text(self) -> str:
        """As listed in ``/health`` ``problems``."""
        return f"{self.name}: {self.error} (since {self.since.isoformat()})"


class Outages:
    """The node's current problems, reported by its loops and read by ``/health``."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._problems: dict[str, Problem] = {}

    def failed(self, name: str, exc: BaseException) -> bool:
        """Report that ``name`` failed with ``exc``; True when this starts a new outage
        (log it then, not on every retry). A `StoreUnavailable` also marks the database."""
        if isinstance(exc, StoreUnavailable):
            self.database_failed(exc)
        return self._report(name, exc)

    def report(self, name: str, text: str) -> bool:
        """Report a problem that is no exception (a lost lease, a LISTEN connection being
        re-established) until `recovered`; True when this starts it."""
        known = self._problems.get(name)
        self._problems[name] = Problem(name, text, known.since if known else self.clock.now())
        return known is None

    def recovered(self, name: str) -> bool:
        """``name`` works again; True when it had been reported."""
        return self._problems.pop(name, None) is not None

    def database_failed(self, exc: BaseException) -> None:
        """The database is unavailable (a connection lost, the disk full, …)."""
        if self._report(DATABASE, exc):
            log.error("database_unavailable", extra={"error": _first_line(exc)})

    def database_ok(self) -> None:
        """A write to the database worked: any database outage is over."""
        problem = self._problems.pop(DATABASE, None)
        if problem is not None:
            log.warning("database_recovered", extra={
                "down_for": f"{(self.clock.now() - problem.since).total_seconds():.1f}s"})

    def database_down_for(self) -> timedelta | None:
        """How long the database has been unavailable, or None while it is not."""
        problem = self._problems.get(DATABASE)
        return None if problem is None else self.clock.now() - problem.since

    def database_problem(self) -> StoreUnavailable | None:
        """The database outage as an error to answer with, or None."""
        problem = self._problems.get(DATABASE)
        return None if problem is None else StoreUnavailable(problem.error)

    def status(self) -> str:
        """``down`` while the database is away, ``degraded`` for any other problem."""
        if DATABASE in self._problems:
            return "down"
        return "degraded" if self._problems else "ok"

    def problems(self) -> list[str]:
        """Every current problem, the database first."""
        return [p.text() for p in sorted(self._problems.values(),
                                         key=lambda p: (p.name != DATABASE, p.name))]

    def _report(self, name: str, exc: BaseException) -> bool:
        return self.report(name, _first_line(exc))


class Finished(Exception):
    """Raised by a `periodic` body when its work is over (e.g. a lease another node took)."""


async def periodic(name: str, body: Callable[[], Awaitable[object]], *, every: float,
                   outages: Outages, backoff: Backoff | None = None,
                   wait_first: bool = False) -> None:
    """Run ``body`` every ``every`` seconds until cancelled or it raises `Finished`,
    waiting out its failures (``wait_first``: its first run one interval from now)."""
    backoff = backoff or Backoff()
    if wait_first:
        await asyncio.sleep(every)
    while True:
        try:
            await body()
        except Finished:
            return
        except Exception as exc:
            failing(name, exc, outages)
            await asyncio.sleep(backoff.next())
            continue
        if outages.recovered(name):
            log.warning("loop_recovered", extra={"loop": name})
        backoff.reset()
        await asyncio.sleep(every)


def failing(name: str, exc: BaseException, outages: Outages) -> None:
    """Report a failure of ``name``; log it once per outage (a database outage at
    warning level without a traceback: it is expected and retried)."""
    if not outages.failed(name, exc):
        return
    if isinstance(exc, StoreError):
        log.warning("loop_waiting", extra={"loop": name, "error": _first_line(exc)})
    else:
        log.error("loop_failed", extra={"loop": name}, exc_info=exc)


async def supervise(name: str, service: Callable[[], Awaitable[None]], *, outages: Outages,
                    backoff: Backoff | None = None,
                    healthy_after: float = HEALTHY_AFTER) -> None:
    """Run ``service``; restart it with back-off whenever it dies, until cancelled."""
    backoff = backoff or Backoff(first=0.5, maximum=30.0)
    while True:
        run = asyncio.ensure_future(service())
        try:
            if await _settled(name, run, outages, healthy_after):
                backoff.reset()
            try:
                await run
                return  # finished on purpose (e.g. a surface with nothing to do)
            except Exception as exc:
                failing(name, exc, outages)
                delay = backoff.next()
                log.warning("service_restarting", extra={"service": name,
                                                         "retry_in": f"{delay:.1f}s"})
                await asyncio.sleep(delay)
        finally:
            if not run.done():  # cancelled while it runs: take the service down with us
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)


async def _settled(name: str, run: asyncio.Future[None], outages: Outages,
                   healthy_after: float) -> bool:
    """Wait until ``run`` ends or has run ``healthy_after`` seconds; in the latter case
    whatever was wrong with it is over: clear its report and return True."""
    done, _ = await asyncio.wait({run}, timeout=healthy_after)
    if done:
        return False
    if outages.recovered(name):
        log.warning("service_recovered", extra={"service": name})
    return True

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
