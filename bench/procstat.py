"""What the benchmarks read from /proc: a process's memory, open files and CPU time, and
a one-line description of the machine a figure was measured on.

Linux only (the benchmarks are); a process that ended reads as 0 rather than failing, so a
worker that exits between two samples does not abort a run. A benchmark imports it as
``procstat`` (a script's own directory is first on ``sys.path``).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (VmRSS), in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def open_files(pid: int) -> int:
    """How many file descriptors ``pid`` holds (sockets included)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far, in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # The command name (field 2) may hold spaces: count fields after its ")".
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def own_cpu_seconds() -> float:
    """CPU time of this process so far (user + system), in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raise_open_files(need: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE to at least ``need`` (children inherit it);
    the limit now in force. Exits naming the hard limit when it is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise SystemExit(f"needs {need} open files, the hard limit is {hard} "
                             "(raise it: ulimit -Hn, or limits.conf)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        soft = need
    return soft


def machine() -> str:
    """``nproc``, the CPU model and the load averages, for the line under a figure."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return f"machine: nproc {len(os.sched_getaffinity(0))} ({model}), load average {load}"
