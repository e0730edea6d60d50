"""The stdio servers' processes, found by pid so that they can be stopped for sure.

The `mcp` SDK spawns a stdio server in a session of its own and does not expose the
process. To watch it (did it exit?) and to kill it if its own shutdown failed, we find it
in /proc: a child of this process whose argv is the configured command, not yet claimed
by another connection. Elsewhere than Linux nothing is found and only the SDK stops it.
"""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")
_claimed: set[int] = set()


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] if raw else []


def _parent(pid: int) -> int | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; split after it.
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 else None


def child_pid(argv: list[str]) -> int | None:
    """The pid of our child process running ``argv``, claimed for the caller; else None."""
    if not _PROC.is_dir():
        return None
    me = os.getpid()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in _claimed or _parent(pid) != me:
            continue
        if _cmdline(pid) == argv:
            _claimed.add(pid)
            return pid
    return None


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        if _PROC.is_dir():
            return False
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    return state not in ("Z", "X")


def running(pid: int, argv: list[str]) -> bool:
    """True while ``pid`` still runs ``argv`` (not a new process that got the number)."""
    return is_alive(pid) and _cmdline(pid) in (argv, None)


def release(pid: int) -> None:
    """Forget ``pid``: its process is gone (a new process may get the number)."""
    _claimed.discard(pid)
