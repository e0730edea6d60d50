"""The one thread that owns a SQLite store's connection, fed a burst of calls at a time.

No sqlite3 call ever runs on the event loop: the loop hands calls over and awaits their
futures. The hand-over costs two thread wake-ups (loop → thread, thread → loop), several
times what SQLite spends on a small WAL transaction, so it is paid per burst, not per call:

- calls made in the same turn of the event loop travel together (one queue put);
- the thread takes everything waiting, then runs the batch in three parts: the reads
  (each statement its own snapshot); every write unit in ONE transaction, each unit
  all-or-nothing by itself (one statement, or several under a savepoint), so that a unit
  that fails (a lost compare-and-set) is rolled back alone while the others commit
  together (group commit); then the calls that manage their own transactions (the
  shared SQLAlchemy code, see `SqliteTaskStore._tx`);
- all results go back to the loop in one `call_soon_threadsafe`.

Running a batch in this order rather than the order of submission is still a valid
serial order: every call in a batch was pending at the same time (no caller has seen
another's result), and a unit's result is released only once its transaction committed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from signoff.errors import StoreError
from signoff.runtime.store.outage import store_error

log = logging.getLogger(__name__)
MAX_GROUP = 200  # write units per transaction: bounds the wait of the first one
_UNSET: Any = object()


class Kind(enum.Enum):
    """How the thread runs a call."""

    READ = "read"  # statements outside any transaction
    UNIT = "unit"  # a write sharing the batch's transaction, all-or-nothing by itself
    ALONE = "alone"  # begins and ends its own transaction(s)


@dataclass(slots=True)
class _Call:
    kind: Kind
    fn: Callable[[], Any]
    future: asyncio.Future[Any]
    result: Any = _UNSET
    error: BaseException | None = None


class _Broken(Exception):
    """SQLite ended the batch's transaction on its own (I/O error, disk full)."""


class StoreThread:
    """Runs callables on one thread that owns the connection made by ``connect``."""

    def __init__(self, *, connect: Callable[[], sqlite3.Connection],
                 close: Callable[[], None], label: str, name: str = "signoff-sqlite",
                 after_batch: Callable[[], None] | None = None) -> None:
        self._connect = connect
        self._close = close
        self._after_batch = after_batch  # run on the thread once a batch has run
        self.label = label  # the database, as named in error messages
        self.name = name
        self.commits = 0  # transactions committed (benchmarks compare against this)
        self._conn: sqlite3.Connection | None = None
        self._queue: queue.SimpleQueue[list[_Call] | None] = queue.SimpleQueue()
        self._pending: list[_Call] = []
        self._thread: threading.Thread | None = None

    # -- the loop's side -----------------------------------------------------------------
    def submit(self, kind: Kind, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Queue ``fn`` for the thread; the future holds its result or exception."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append(_Call(kind, fn, future))
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
            self._thread.start()
        return future

    def _flush(self) -> None:
        if self._pending:
            calls, self._pending = self._pending, []
            self._queue.put(calls)

    async def stop(self) -> None:
        """Run what is queued, close the connection (in the thread), end the thread."""
        if self._thread is None:
            return
        closed = self.submit(Kind.ALONE, self._close_conn)
        self._flush()
        self._queue.put(None)
        try:
            await closed
        finally:
            self._thread = None  # a later call starts a new thread with a new connection

    # -- the thread's side ---------------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        """The thread's connection, opened on first use (only valid on the thread)."""
        if self._conn is None:
            try:
                self._conn = self._connect()
            except sqlite3.Error as exc:
                raise store_error(exc, self.label, opening=True) from exc
        return self._conn

    def _close_conn(self) -> None:
        self._close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def error(self, exc: Exception) -> Exception:
        """A sqlite3 failure as the store's error, naming the database.

        Constraint violations stay as they are: the store reads them as a lost race.
        """
        if isinstance(exc, sqlite3.Error | OSError) and not isinstance(exc,
                                                                      sqlite3.IntegrityError):
            return store_error(exc, self.label)
        return exc

    def _main(self) -> None:
        while True:
            first = self._queue.get()
            batch, stop = [] if first is None else first, first is None
            while not stop:  # take the whole burst: one wake-up for all of it
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                stop = more is None
                batch.extend(more or [])
            self._run_batch(batch)
            if stop:
                return

    def _run_batch(self, batch: list[_Call]) -> None:
        try:
            units = [c for c in batch if c.kind is Kind.UNIT]
            for call in batch:
                if call.kind is Kind.READ:
                    self._one(call)
            for start in range(0, len(units), MAX_GROUP):
                self._group(units[start:start + MAX_GROUP])
            for call in batch:
                if call.kind is Kind.ALONE:
                    self._one(call)
            if self._after_batch is not None and self._conn is not None:
                self._after_batch()
        except Exception as exc:  # e.g. a failed ROLLBACK: fail what did not run, go on
            log.exception("sqlite_batch_failed", extra={"database": self.label})
            for call in batch:
                if call.error is None and call.result is _UNSET:
                    call.error = self.error(exc)
        finally:
            self._deliver(batch)  # never leave a caller waiting

    def _one(self, call: _Call) -> None:
        try:
            call.result = call.fn()
        except Exception as exc:
            call.error = self.error(exc)

    def _group(self, units: list[_Call]) -> None:
        """Run write units in one transaction (group commit).

        Each unit must be all-or-nothing by itself: a single statement is, and a unit of
        several statements wraps them in `savepoint`. A unit that raises has written
        nothing and gets its exception; the others still commit together.
        """
        try:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")  # waits up to busy_timeout for other processes
        except (sqlite3.Error, StoreError) as exc:
            for call in units:
                call.error = self.error(exc)
            return
        try:
            for call in units:
                try:
                    call.result = call.fn()
                except Exception as exc:
                    call.error = self.error(exc)
                    if not conn.in_transaction:
                        raise _Broken(str(exc)) from exc
            conn.execute("COMMIT")
            self.commits += 1
        except (sqlite3.Error, _Broken) as exc:
            cause = exc.__cause__ if isinstance(exc, _Broken) else exc
            failure = store_error(cause if isinstance(cause, Exception) else exc, self.label)
            for call in units:  # nothing of this transaction is kept
                if call.error is None:
                    call.result, call.error = _UNSET, failure
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Make the statements of one unit all-or-nothing inside the group's transaction."""
        conn = self.conn
        conn.execute("SAVEPOINT unit")
        try:
            yield
        except BaseException:
            if conn.in_transaction:  # else SQLite ended the transaction itself
                conn.execute("ROLLBACK TO unit")
                conn.execute("RELEASE unit")
            raise
        conn.execute("RELEASE unit")

    def _deliver(self, batch: list[_Call]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        for call in batch:
            by_loop.setdefault(call.future.get_loop(), []).append(call)
        for loop, calls in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, calls)
            except RuntimeError:
                pass  # that loop is closed: nobody is waiting any more


def _settle(calls: list[_Call]) -> None:
    """On the loop: hand each caller its result."""
    for call in calls:
        if call.future.done():
            continue  # the caller was cancelled
        if call.error is not None:
            call.future.set_exception(call.error)
        else:
            call.future.set_result(call.result)
