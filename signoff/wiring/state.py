"""Where a node keeps its own files: the state dir, its node id, what the tools may not touch."""

from __future__ import annotations

import logging
import os
import secrets
import site
import socket
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.runtime.state import (
    NODE_ID_FILE,
    ProtectedFiles,
    create_private_file,
    ensure_private_dir,
    migrate_layout,
    prepare_sqlite_file,
)
from signoff.runtime.store.sqlite.store import sqlite_path

log = logging.getLogger(__name__)


def prepare_state(settings: Settings, work_dir: Path | None = None) -> Path:
    """The state dir, created 0700, with a 0.2 layout's files moved in from the work dir
    (once, logged). ConfigError when it lies inside the work dir."""
    state = settings.resolved_state_dir(work_dir)
    ensure_private_dir(state)
    wd = settings.resolved_work_dir(work_dir)
    moved, left = migrate_layout(wd, state, database_default=settings.daemon.database is None)
    if moved:
        log.warning(f"state_moved from={wd} to={state} files={','.join(moved)} (the daemon's "
                    f"own files no longer live in the work dir, where the tools could reach "
                    f"them)")
    if left:
        log.warning(f"state_not_moved dir={wd} files={','.join(left)} (the state dir {state} "
                    f"has its own; these old copies are not used, and the tools can read "
                    f"them: delete them)")
    return state


def protected_files(state_dir: Path, database: str | None, *,
                    config: Iterable[Path] = (), work_dir: Path | None = None
                    ) -> ProtectedFiles:
    """What the file tools refuse: the state dir, and the SQLite file wherever it is
    (created 0600 first when it is not there yet); the ``config`` files the daemon takes
    its rules from (read and written); writing into the daemon's own code, its Python
    environment and the signoff package (`daemon_code`), and what it imports from
    ``work_dir`` (`imported_from`: call this once the plug-ins are loaded)."""
    path = sqlite_path(database) if database else None
    db = Path(path) if path else None
    if db is not None:
        prepare_sqlite_file(db)
        mode = db.stat().st_mode & 0o777
        if mode & 0o077:  # a file of the user's own, not ours to change: say so
            log.warning(f"database_readable_by_others path={db} mode={oct(mode)} (chmod 600 "
                        f"it: it holds the audit log and every pending request)")
    inside = imported_from(work_dir) if work_dir is not None else []
    if work_dir is not None and work_dir.resolve() in inside:
        log.warning(f"work_dir_on_import_path dir={work_dir} (the daemon imports Python "
                    f"modules from its work dir, so the file tools write nothing there: "
                    f"start it with the signoff command or python -P -m signoff, or from "
                    f"another directory, and keep PYTHONPATH out of the work dir)")
    return ProtectedFiles.of(state_dir=state_dir, database=db, config=config,
                             code=[*daemon_code(), *inside])


def imported_from(work_dir: Path) -> list[Path]:
    """What the daemon imports from inside ``work_dir``: its import path's entries there
    (``python -m signoff`` started from the work dir puts it first, as ``PYTHONPATH`` or
    an editable install may) and the top-level modules and packages it loaded from there
    (an editable plug-in's). The agent writes the work dir unattended: a module it put
    there under a name the daemon imports would run in the daemon at its next start."""
    root = work_dir.resolve()
    places = [Path(entry or os.getcwd()) for entry in sys.path]  # "": the working dir
    for name, module in list(sys.modules.items()):
        if "." in name or module is None:  # a submodule is inside its top-level package
            continue
        where = getattr(module, "__path__", None) or [getattr(module, "__file__", None)]
        places.extend(Path(p) for p in where if isinstance(p, str))
    found: list[Path] = []
    for place in places:
        try:
            real = place.resolve()
        except (OSError, RuntimeError):
            continue
        if real.is_relative_to(root) and real not in found:
            found.append(real)
    return found


def daemon_code() -> list[Path]:
    """Where the running daemon's code lives: the interpreter's library and installed
    packages (plug-ins, ``.pth`` files), its scripts (the ``signoff`` launcher), the
    user's site-packages, and the signoff package (an editable install's source tree is
    outside them). Not ``sys.prefix`` as a whole: a system Python's is ``/usr``, and a
    work dir under ``/usr/src`` must stay writable."""
    paths = sysconfig.get_paths()
    found = [Path(paths[k]) for k in ("purelib", "platlib", "stdlib", "platstdlib", "scripts")
             if paths.get(k)]
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    return [*found, *([Path(user)] if user else []), Path(__file__).resolve().parents[1]]


def node_id(settings: Settings, state_dir: Path) -> str:
    """``daemon.node_id``, else the host name + a short random suffix.

    The suffix is drawn once and kept in ``<state_dir>/node-id``: distinct between daemons
    sharing a database (each has its own state dir), and stable across restarts, so that a
    restarted daemon takes its own interrupted claims back at once instead of waiting for
    their leases to run out.
    """
    if settings.daemon.node_id:
        return settings.daemon.node_id
    return f"{socket.gethostname()}-{_node_suffix(state_dir / NODE_ID_FILE)}"


def _node_suffix(path: Path) -> str:
    try:
        kept = path.read_text().strip()
    except FileNotFoundError:
        kept = ""
    except OSError as exc:
        raise ConfigError(f"cannot read the node id in {path}: {exc}") from exc
    if kept:
        return kept
    suffix = secrets.token_hex(3)
    try:
        if not create_private_file(path, (suffix + "\n").encode()):
            # another process on this state dir wrote it first
            return path.read_text().strip() or suffix
    except OSError as exc:
        raise ConfigError(f"cannot keep the node id in {path}: {exc}") from exc
    return suffix
