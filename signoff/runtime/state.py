"""The daemon's own files (the state dir) and how the tools are kept away from them.

The state dir (``daemon.state_dir``) holds everything that is not the tools' work: the
SQLite database with its ``-wal``/``-shm`` and grant mark, the node id, the server secret
and other keys, the MCP servers' logs. It is created 0700 and its files 0600: another
local user reads none of it. It may not lie inside the work dir (a config error), and
the file tools refuse it anyway, by identity (device + inode) rather than by spelling,
wherever it and the database are configured: see :class:`ProtectedFiles`.

The server secret (32 random bytes, ``server-secret``) is drawn on the first start and
never leaves the state dir; keys that must be known to every node of a cluster are
derived from it (`derive_key`), so nothing key-like is stored in the database.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from signoff.errors import ConfigError, PathEscape

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
DATABASE_FILE = "signoff.db"
NODE_ID_FILE = "node-id"
SECRET_FILE = "server-secret"
SECRET_BYTES = 32
# What SQLite (and our grant mark, `signoff.runtime.store.sqlite.grants`) keeps beside the
# database file under the same name.
SQLITE_SIBLINGS = ("", "-wal", "-shm", "-journal", "-grants")

Identity = tuple[int, int]  # (st_dev, st_ino)


def identity(st: os.stat_result) -> Identity:
    """A file's identity: the same for every name (hard link, symlink, bind mount) of it."""
    return (st.st_dev, st.st_ino)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:  # not there (yet), or not reachable: it has no identity to compare
        return None


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` 0700 (parents as needed); tighten an existing one of ours to 0700."""
    try:
        path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        st = path.stat()
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            path.chmod(PRIVATE_DIR)
            log.warning(f"state_dir_tightened path={path} was={oct(st.st_mode & 0o777)}")
    except OSError as exc:
        raise ConfigError(f"cannot create the state dir {path}: {exc}") from exc


def create_private_file(path: Path, data: bytes) -> bool:
    """Write a new file 0600 with ``data``; False (and nothing written) if it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return True


def why_unwritable(path: Path) -> str | None:
    """Why files cannot be created or written at ``path`` (a directory to be, or a file),
    or None: asked before anything is started, so that a read-only file system or a
    missing permission is one clear line instead of a failure deep in the start."""
    probe = path
    # os.path.exists, not Path.exists: a parent we may not enter is "not there" here,
    # and the walk goes on up to the directory that says why.
    while not os.path.exists(probe) and probe != probe.parent:
        probe = probe.parent
    if probe != path and not probe.is_dir():
        return f"{probe} is a file, not a directory"
    if os.statvfs(probe).f_flag & os.ST_RDONLY:
        return f"{probe} is on a read-only file system"
    wanted = os.W_OK | (os.X_OK if probe.is_dir() else 0)
    if not os.access(probe, wanted):
        owner = probe.stat()
        return (f"no permission to write in {probe} (mode {stat.S_IMODE(owner.st_mode):o}, "
                f"owner uid {owner.st_uid}; signoff runs as uid {os.geteuid()})")
    return None


def prepare_sqlite_file(path: Path) -> None:
    """Create the database file empty and 0600 when it is not there yet (SQLite takes an
    empty file as a new database, and gives its -wal and -shm the file's permissions)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        create_private_file(path, b"")
    except OSError as exc:
        raise ConfigError(f"cannot create the database {path}: {exc}") from exc


def server_secret(state_dir: Path) -> bytes:
    """The node's server secret, drawn on the first call and kept in the state dir."""
    path = state_dir / SECRET_FILE
    try:
        create_private_file(path, secrets.token_bytes(SECRET_BYTES))
        secret = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot keep the server secret in {path}: {exc}") from exc
    if len(secret) < SECRET_BYTES:  # cut short (a crash while writing, a hand edit)
        raise ConfigError(f"the server secret {path} holds {len(secret)} bytes, not "
                          f"{SECRET_BYTES}: restore it from another node or delete it "
                          f"(links already mailed then stop working)")
    return secret


def derive_key(secret: bytes, purpose: str, *parts: str) -> bytes:
    """A key for ``purpose`` and ``parts`` (an approval id, a card id): HMAC-SHA256 of
    the server secret, so it is never stored and one key proves nothing about another."""
    message = "\x00".join((purpose, *parts)).encode("utf-8")
    return hmac.new(secret, message, hashlib.sha256).digest()


def migrate_layout(work_dir: Path, state_dir: Path, *, database_default: bool
                   ) -> tuple[list[str], list[str]]:
    """Move a 0.2 layout's state (database with its siblings and grant mark, node id, MCP
    logs) from the work dir into the state dir, 0600; returns (names moved, names left).

    A group moves only when the state dir has none of it: the database with its -wal
    and -shm is one group (they belong together). A group the state dir already has is
    left in the work dir for a person to look at (the caller says so).
    """
    if not work_dir.is_dir() or work_dir == state_dir:
        return [], []
    groups = [[NODE_ID_FILE], *([p.name] for p in sorted(work_dir.glob("mcp-*.log")))]
    if database_default:
        groups.append([DATABASE_FILE + suffix for suffix in SQLITE_SIBLINGS])
    moved: list[str] = []
    left: list[str] = []
    for group in groups:
        found = [n for n in group if (work_dir / n).is_file() and not (work_dir / n).is_symlink()]
        if not found:
            continue
        if any((state_dir / n).exists() for n in group):
            left.extend(found)
            continue
        for name in found:
            _move_private(work_dir / name, state_dir / name)
        moved.extend(found)
    return moved, left


def _move_private(old: Path, new: Path) -> None:
    try:
        shutil.move(old, new)
        new.chmod(PRIVATE_FILE)
    except OSError as exc:
        raise ConfigError(f"cannot move {old} into the state dir {new.parent}: {exc}") from exc


@dataclass(frozen=True)
class ProtectedFiles:
    """The daemon's own files, as the file tools must see them: by identity.

    ``dirs`` are the identities of the state dir (taken once: a directory keeps its inode);
    any file in it, including one created later (a new ``-wal``), is refused by its
    containing directory's identity. The database, wherever it is configured, is refused
    by its directory's identity plus its name (with every SQLite sibling). A file with
    other hard links is refused for writing and deleting outright, and for reading when
    its identity is one of the protected files' now (a few stat calls, only then).
    """

    state_dir: Path | None = None
    database: Path | None = None
    dirs: frozenset[Identity] = frozenset()
    database_dir: Identity | None = None
    names: frozenset[str] = field(default_factory=frozenset)
    # The files the daemon takes its rules from (its config file, its Cedar policies),
    # as (directory identity, name) and as their paths: neither read (the config may hold
    # keys and tokens) nor written (a rewritten policy would rule after the next start).
    config: frozenset[tuple[Identity, str]] = frozenset()
    config_paths: tuple[Path, ...] = ()
    # The daemon's own code (its Python environment, the signoff package): never written,
    # or code of an agent's choosing would run in the daemon after the next start.
    code: tuple[Path, ...] = ()

    @classmethod
    def of(cls, *, state_dir: Path | None, database: Path | None,
           config: Iterable[Path] = (), code: Iterable[Path] = ()) -> ProtectedFiles:
        """Take the identities of ``state_dir`` and ``database``'s directory (both exist),
        of each ``config`` file's directory, and the real paths of the ``code`` dirs."""
        dirs = {identity(st) for st in [_stat(state_dir)] if st} if state_dir else set()
        db_dir = _stat(database.parent) if database else None
        names = frozenset(database.name + s for s in SQLITE_SIBLINGS) if database else frozenset()
        configs = [p.resolve() for p in config]
        named = {(identity(st), p.name) for p in configs for st in [_stat(p.parent)] if st}
        return cls(state_dir=state_dir, database=database, dirs=frozenset(dirs),
                   database_dir=identity(db_dir) if db_dir else None, names=names,
                   config=frozenset(named), config_paths=tuple(configs),
                   code=tuple(p.resolve() for p in code))

    def __bool__(self) -> bool:
        return bool(self.dirs or self.database_dir or self.config or self.code)

    def current(self) -> frozenset[Identity]:
        """The identities of every protected file as they are on disk now."""
        found: set[Identity] = set()
        if self.state_dir is not None:
            try:
                with os.scandir(self.state_dir) as it:
                    found.update(identity(e.stat(follow_symlinks=False)) for e in it)
            except OSError:
                pass
        if self.database is not None:
            for name in self.names:
                st = _stat(self.database.parent / name)
                if st is not None:
                    found.add(identity(st))
        found.update(identity(st) for p in self.config_paths for st in [_stat(p)] if st)
        return frozenset(found)

    def why(self, real: Path, *, write: bool) -> str | None:
        """Why a tool may not touch the resolved path ``real``; None when it may."""
        if not self:
            return None
        st, parent = _stat(real), _stat(real.parent)
        if st is not None and identity(st) in self.dirs:
            return "is the daemon's state dir"
        if parent is not None and identity(parent) in self.dirs:
            return "is in the daemon's state dir"
        if parent is not None and identity(parent) == self.database_dir and real.name in self.names:
            return "is the daemon's database"
        if parent is not None and (identity(parent), real.name) in self.config:
            return "is the daemon's own configuration"
        if write and any(real.is_relative_to(p) for p in self.code):
            return "is the daemon's own code"
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
            return None
        if write:
            return "has other hard links (writing it would change them too)"
        if identity(st) in self.current():
            return "is the daemon's own file (a hard link to it)"
        return None

    @staticmethod
    def opened(st: os.stat_result) -> str | None:
        """Why an opened file (its ``fstat``) may not be written: checked after opening, so
        a hard link swapped in between the check and the open is not written. A file with
        one name was checked by that name (`why`), so its link count is all that is left."""
        if st.st_nlink > 1:
            return "has other hard links (writing it would change them too)"
        return None

    def refuse(self, raw: str, real: Path, *, write: bool) -> None:
        """Raise PathEscape naming ``raw`` when `why` finds a reason."""
        reason = self.why(real, write=write)
        if reason:
            raise PathEscape(f"path {raw!r} {reason}; the tools may not touch it")
