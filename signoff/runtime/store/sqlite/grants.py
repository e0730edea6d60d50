"""`GrantCache`: `SqliteTaskStore.grant_candidates` answered on the event loop while no
grant can have changed, and by the store's thread otherwise.

Why: the policy asks for the grants under a key on every SEND or DESTRUCTIVE action, and
a round trip to the store thread (two thread wake-ups) costs ~100 µs, ten times the rest
of an evaluation (bench/policy.py). The cache holds, per key, what the last read of the
database returned (the unrevoked grants, oldest first — possibly none) and never decides
coverage: that stays `signoff.runtime.policy.grants.covers`, applied to whatever the
store returns, so expiry is judged at the Clock's time exactly as without a cache.

Coherence. An entry is used only while no grant can have changed since it was read:

- Every `SqliteTaskStore` — in this process or another one (the daemon, `signoff
  handle`) — writes a fresh random token into the database's grant mark, the file
  ``<database>-grants``, on its thread *before* the statements of any change of grants
  (a Change with grants or revocations, a reset) and again once that transaction has
  ended. An entry records the mark as it was read just before the entry's rows, and a
  lookup on the loop reads the mark (one ``pread`` of 8 bytes: no lock, no sqlite3 call)
  and uses the entry only if the mark is still the same. So a change of grants that
  committed after the entry's rows were read has moved the mark before it committed; one
  that committed before is in the rows. The mark is a file of our own on purpose: SQLite
  uses POSIX locks, which a process loses on a file the moment it closes *any* descriptor
  of it, so nothing here ever opens SQLite's own files.
- This store's own grant writes also bump an in-process generation (on its thread,
  before their statements), so its own entries are dropped even without the mark.
- Writes by anything that is not a `SqliteTaskStore` (the sqlite3 shell, the generic
  SQLAlchemy store on the same file) do not move the mark. They are noticed through
  ``PRAGMA data_version`` of the thread's connection (it changes when another connection
  committed), which the thread reads after every batch of calls and before every read of
  grants: a running daemon's thread runs at least once per ``daemon.poll_interval``, so
  such a write is seen within that time, not at once (README, "Database").

The mark gets the database file's permissions (and owner, as root), as SQLite gives its
-wal and -shm files. A store that cannot open it answers every call on the thread and
refuses changes of grants (StoreError): another process that could open it relies on it.
Without ``os.pread`` (not a POSIX platform) no process caches and nothing is refused.
Entries are only read and written on the loop; the generation and the data version
only on the thread, and the loop reads them (single attribute reads under the GIL).
Bounded: past `MAX_KEYS` keys the oldest entry goes.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

from signoff.runtime.models import Grant
from signoff.runtime.store.sqlite import queries as q

MAX_KEYS = 4096  # grant keys remembered (each has a few grants at most)
MARK_SUFFIX = "-grants"  # next to the database's -wal and -shm
_TOKEN = 8  # bytes of the mark


@dataclass(frozen=True, slots=True)
class Read:
    """What `GrantCache.load` read on the thread: the mark and generation just before the
    rows, and the rows."""

    mark: bytes | None
    generation: int
    grants: tuple[Grant, ...]


class GrantCache:
    """Grant candidates per key, valid while the grant mark and generation stay put."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.mark_path = f"{path}{MARK_SUFFIX}"
        self.broken: str | None = None  # why the mark could not be opened
        self._entries: dict[str, Read] = {}
        self._fd: int | None = None
        self._version: int | None = None  # PRAGMA data_version at the last refresh
        self._changed = False  # a change of grants ran in the current batch
        self.generation = 0
        self.hits = 0  # for tests and benchmarks: lookups answered on the loop

    # -- the thread's side -----------------------------------------------------------------
    def attach(self, conn: sqlite3.Connection) -> None:
        """Open the grant mark (creating it) once the thread's connection is open."""
        self.detach()
        self.broken = None
        if not hasattr(os, "pread"):
            return  # no process on this platform caches: nobody reads a mark
        try:
            self._fd = _open_mark(self.mark_path, self.path)
            if os.fstat(self._fd).st_size < _TOKEN:
                os.pwrite(self._fd, os.urandom(_TOKEN), 0)
        except OSError as exc:
            self.detach()  # no mark here: the thread answers every call, and
            self.broken = str(exc)  # `changing` refuses (others may rely on the mark)
            return
        self.refresh(conn)

    def detach(self) -> None:
        """Forget everything and close the mark (when the connection closes)."""
        self.generation += 1
        self._version = None
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def changing(self) -> None:
        """Called on the thread before a change of grants: no entry read before it may be
        used, here or in another process. Raises OSError (the change must not happen)
        when the mark cannot be moved — also when it could not be opened: another
        process that could is relying on it."""
        if self.broken is not None:
            raise OSError(self.broken)
        self.generation += 1
        self._changed = True
        if self._fd is not None:
            os.pwrite(self._fd, os.urandom(_TOKEN), 0)

    def refresh(self, conn: sqlite3.Connection) -> None:
        """After a batch: move the mark again if grants changed in it (their transaction
        has ended now), and drop every entry if another connection committed."""
        if self._changed:
            self._changed = False
            if self._fd is not None:
                os.pwrite(self._fd, os.urandom(_TOKEN), 0)
        row = conn.execute("PRAGMA data_version").fetchone()
        version = int(row[0]) if row else None
        if version is None or version != self._version:
            self.generation += 1
        self._version = version

    def load(self, conn: sqlite3.Connection, key: str) -> Read:
        """Read the grants under ``key``, with the mark and generation they are valid for
        (both taken before the rows)."""
        self.refresh(conn)
        mark = self._mark()
        generation = self.generation
        return Read(mark, generation, tuple(q.grant_candidates(conn, key)))

    # -- the loop's side -------------------------------------------------------------------
    def _mark(self) -> bytes | None:
        fd = self._fd
        if fd is None:
            return None
        try:
            return os.pread(fd, _TOKEN, 0)
        except OSError:  # closed by the thread in the meantime
            return None

    def lookup(self, key: str) -> tuple[Grant, ...] | None:
        """The grants under ``key`` if known to be current, else None (ask the thread)."""
        entry = self._entries.get(key)
        if entry is None or entry.mark is None or entry.generation != self.generation:
            return None
        if self._mark() != entry.mark or entry.generation != self.generation:
            return None  # some store changed grants since the read (or this one closed)
        self.hits += 1
        return entry.grants

    def remember(self, key: str, read: Read) -> None:
        """Keep what `load` read (a later `lookup` checks it is still current)."""
        if read.mark is None or read.generation != self.generation:
            return  # no mark, or already outdated
        if key not in self._entries and len(self._entries) >= MAX_KEYS:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = read


def _open_mark(mark: str, database: str) -> int:
    """Open (or create) the mark with the database file's permissions and, as root, its
    owner — what SQLite does for the -wal and -shm files — so that every process that
    may write the database may move the mark."""
    try:
        st: os.stat_result | None = os.stat(database)
    except OSError:
        st = None
    fd = os.open(mark, os.O_RDWR | os.O_CREAT, (st.st_mode & 0o777) if st else 0o644)
    if st is not None and hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except OSError:
            pass  # as SQLite: the database's owner may still open it
    return fd
