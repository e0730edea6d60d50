"""The one place where a database driver's failure becomes the store's error.

Every store (SQLite through sqlite3 or SQLAlchemy, PostgreSQL through SQLAlchemy or async
psycopg) hands the exception it caught to `store_error`, which says whether it is an
outage — retryable, and waited out by every loop of the daemon (`StoreUnavailable`, or
`StoreFull` for a full disk, `StoreReadOnly` for a read-only file system or a standby
after a failover) — or a final `StoreError`. Constraint violations are not converted:
the stores read them as a lost race.

Outages: a connection that failed or was closed under us (a restart, a failover, a
network cut), a server shutting down or not yet accepting connections, a lock or idle
timeout that cut a waiter short, a busy or locked SQLite file, a full disk (sqlite
``SQLITE_FULL``, PostgreSQL ``53100``, ``ENOSPC``), a read-only file system or database
(``EROFS``, ``SQLITE_READONLY``, PostgreSQL ``25006``), an I/O error.
"""

from __future__ import annotations

import errno
import sqlite3

import sqlalchemy as sa

from signoff.errors import StoreError, StoreFull, StoreReadOnly, StoreUnavailable

# sqlite3 reports these as OperationalError with a fixed message (its error codes only
# from Python 3.11's sqlite_errorcode, which a wrapped error may not carry).
_SQLITE_FULL = ("database or disk is full", "disk is full")
_SQLITE_READONLY = ("attempt to write a readonly database", "readonly database")
_SQLITE_TRANSIENT = ("database is locked", "disk i/o error",
                     "database table is locked", "cannot commit", "no such savepoint")
# PostgreSQL SQLSTATE classes and codes that mean "not now" rather than "never".
_PG_FULL = {"53100", "53200"}  # disk_full, out_of_memory
_PG_READONLY = {"25006"}  # read_only_sql_transaction: a standby after a failover
_PG_TRANSIENT_CLASSES = ("08", "57", "53", "58")  # connection, operator, resources, system
_PG_TRANSIENT = {"55P03", "25P03", "40001", "40P01"}  # lock/idle timeouts, serialization
# A server that answered and refused the connection for good: waiting would never end
# (a typo in the URL, a wrong password); psycopg gives these no SQLSTATE on connect.
_PG_REFUSED = ("does not exist", "password authentication failed",
               "authentication failed", "no pg_hba.conf entry")


def store_error(exc: BaseException, label: str, *, opening: bool = False) -> StoreError:
    """``exc`` (a driver's failure) as the store's error, naming the database ``label``
    (``opening``: the failure was opening it)."""
    if isinstance(exc, StoreError):
        return exc
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    text = _first_line(cause)
    kind = _outage(exc, cause)
    if opening:
        return (kind or StoreError)(f"cannot open database {label}: {text}")
    if kind is None:
        return StoreError(f"database {label} failed: {text}")
    return kind(f"database {label} is unavailable: {text}")


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` is a passing outage (after conversion or before)."""
    if isinstance(exc, StoreError):
        return isinstance(exc, StoreUnavailable)
    return isinstance(store_error(exc, ""), StoreUnavailable)


def _outage(exc: BaseException, cause: BaseException) -> type[StoreUnavailable] | None:
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return StoreUnavailable
    if isinstance(exc, sa.exc.TimeoutError | sa.exc.DisconnectionError):
        return StoreUnavailable  # the pool found no live connection in time
    if isinstance(cause, sqlite3.Error):
        return _sqlite(cause)
    if isinstance(cause, OSError):
        return _os(cause)
    if isinstance(cause, TimeoutError):
        return StoreUnavailable
    return _postgres(cause)


def _sqlite(exc: sqlite3.Error) -> type[StoreUnavailable] | None:
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError):
        return None
    text = str(exc).lower()
    if any(m in text for m in _SQLITE_FULL):
        return StoreFull
    if any(m in text for m in _SQLITE_READONLY):
        return StoreReadOnly
    if isinstance(exc, sqlite3.OperationalError) and any(m in text for m in _SQLITE_TRANSIENT):
        return StoreUnavailable
    return None


def _os(exc: OSError) -> type[StoreUnavailable]:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFull
    if exc.errno == errno.EROFS:
        return StoreReadOnly
    return StoreUnavailable  # refused, reset, unreachable: the server is away


def _postgres(exc: BaseException) -> type[StoreUnavailable] | None:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - only the postgres extra brings it
        return None
    if not isinstance(exc, psycopg.Error):
        return None
    code = exc.sqlstate or ""
    if code in _PG_FULL:
        return StoreFull
    if code in _PG_READONLY:
        return StoreReadOnly
    if code in _PG_TRANSIENT or code.startswith(_PG_TRANSIENT_CLASSES):
        return StoreUnavailable
    # No SQLSTATE: the client side failed (connection closed, server gone, pool timeout),
    # unless the server itself refused us for good.
    if not code and isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        text = str(exc)
        if "FATAL" in text and any(m in text for m in _PG_REFUSED):
            return None
        return StoreUnavailable
    if isinstance(exc, psycopg.errors.QueryCanceled):  # statement/lock timeout
        return StoreUnavailable
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
