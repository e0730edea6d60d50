"""`GrantCache`: `SqliteTaskStore.grant_candidates` answered on the event loop while the
database file has not changed, and by the store's thread when it may have.

Why: the policy asks for the grants under a key on every SEND or DESTRUCTIVE action, and
a round trip to the store thread (two thread wake-ups) costs ~100 µs, ten times the rest
of an evaluation (bench/policy.py). The cache holds, per key, what the last read of the
database returned (the unrevoked grants, oldest first — possibly none) and never decides
coverage: that stays `signoff.runtime.policy.grants.covers`, applied to whatever the
store returns, so expiry is judged at the Clock's time exactly as without a cache.

Coherence — an entry is used only while it is certain that no grant changed since it was
read:

- this store's own grant writes (a Change with grants or revocations, a reset) call
  `invalidate` on the store thread *before* their statements run, so no entry read
  before them is used from then on, and any read after them runs on the same thread,
  after their transaction ended;
- writes by other connections (a `signoff handle` sharing the file, a second store, the
  sqlite3 shell) are seen through two documented SQLite facilities. ``PRAGMA
  data_version`` on the thread's connection changes whenever another connection has
  committed; and the wal-index header (the first 48 bytes of the ``-shm`` file, see
  https://www.sqlite.org/walformat.html, "The WAL-Index Header") is rewritten by every
  commit of any connection (its change counter and checksums move). The thread, after
  each batch and before each read of grants, takes the header (``stamp``) and *then*
  the data_version, invalidating the entries if the data_version moved. On the loop, an
  entry is used only while the header still equals that stamp: any commit since the
  stamp (this store's, another process's) sends the call to the thread. Reading the
  header is a 48-byte memory copy from a shared mapping — no system call, no lock, no
  sqlite3 call on the loop.

Why the mapping is safe to read: it is made after the thread's connection has opened
the ``-shm`` file and is dropped before that connection closes; while a connection holds
the file open, SQLite never truncates it (only the first connection of all does, and
only when no other process has it open). Without WAL (the file system refused it) or
without a ``-shm`` file there is no mapping, and every call goes to the thread as before.

Entries are only read and written on the loop; the generation, the stamp and the data
version only on the thread, and the loop reads them (single attribute reads under the
GIL). Bounded: past `MAX_KEYS` keys the oldest entry is dropped.
"""

from __future__ import annotations

import mmap
import sqlite3
from pathlib import Path

from signoff.runtime.models import Grant
from signoff.runtime.store.sqlite import queries as q

MAX_KEYS = 4096  # grant keys remembered (each is a few grants at most)
_HEADER = 48  # bytes of the wal-index header's first copy (the one written last)


class GrantCache:
    """Grant candidates per key, valid while the database file is unchanged."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, tuple[Grant, ...]]] = {}
        self._map: mmap.mmap | None = None
        self._stamp: bytes | None = None
        self._version: int | None = None  # PRAGMA data_version when stamped
        self.generation = 0
        self.hits = 0  # for tests and benchmarks: lookups answered on the loop

    # -- the thread's side -----------------------------------------------------------------
    def attach(self, conn: sqlite3.Connection, path: str) -> None:
        """Map the wal-index header of ``conn``'s database, if it has one (in WAL mode,
        once the connection has read the file, so that it holds the ``-shm`` open)."""
        self.detach()
        mode = conn.execute("PRAGMA journal_mode").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            return
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the -shm
        try:
            with Path(f"{path}-shm").open("rb") as shm:
                self._map = mmap.mmap(shm.fileno(), _HEADER, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            self._map = None  # no -shm (another VFS): the thread answers every call
        self.refresh(conn)

    def detach(self) -> None:
        """Forget everything and drop the mapping (before the connection closes)."""
        self.invalidate()
        self._stamp = self._version = None
        if self._map is not None:
            self._map.close()
            self._map = None

    def invalidate(self) -> None:
        """No entry read before now may be used (called before a write of grants)."""
        self.generation += 1

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Stamp the header as it is now; invalidate if another connection committed.

        Header first, data_version second: a commit by another connection that the
        stamp includes is then always one the data_version has seen too.
        """
        if self._map is None:
            return
        stamp = self._map[:_HEADER]
        if stamp == self._stamp:
            return  # nobody committed since the last stamp
        row = conn.execute("PRAGMA data_version").fetchone()
        version = int(row[0]) if row else None
        if version is None or version != self._version:
            self.invalidate()
        self._version = version
        self._stamp = stamp

    def load(self, conn: sqlite3.Connection, key: str) -> tuple[int, tuple[Grant, ...]]:
        """Read the grants under ``key`` from the database, labelled with the generation
        they are valid for."""
        self.refresh(conn)
        generation = self.generation
        return generation, tuple(q.grant_candidates(conn, key))

    # -- the loop's side -------------------------------------------------------------------
    def lookup(self, key: str) -> tuple[Grant, ...] | None:
        """The grants under ``key`` if known to be current, else None (ask the thread)."""
        mapped, stamp = self._map, self._stamp
        if mapped is None or stamp is None:
            return None
        try:
            if mapped[:_HEADER] != stamp:  # someone committed since the stamp
                return None
        except ValueError:  # closed by the thread in the meantime
            return None
        entry = self._entries.get(key)
        if entry is None or entry[0] != self.generation:
            return None
        self.hits += 1
        return entry[1]

    def remember(self, key: str, generation: int, grants: tuple[Grant, ...]) -> None:
        """Keep what `load` read (a later `lookup` checks it is still current)."""
        if generation != self.generation:
            return  # already outdated
        if key not in self._entries and len(self._entries) >= MAX_KEYS:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (generation, grants)
