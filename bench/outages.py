"""Soak: daemons through outages, again and again, reporting counts (never times).

While SEND tasks are submitted to alternating nodes and approved as they come, one of
three scenarios is repeated ``--rounds`` times, ``--gap`` seconds of traffic apart:

- ``restarts`` (the default): two daemons on a throwaway PostgreSQL cluster of this
  script's own (on a free port: the shared server is never touched), restarted with fast
  and immediate shutdowns in turn;
- ``paused``: two daemons on such a cluster (3 s leases), one of them frozen (SIGSTOP)
  past its lease and thawed (SIGCONT), alternately. A SEND cut short by the freeze comes
  back to a person ("outcome unknown"); the soak's person denies those (never a blind
  resend), and counts them as ``unknown``;
- ``full-disk``: one daemon on SQLite in a small tmpfs (root only), filled to the last
  byte and freed again.

Then every task is given time to end, and the script prints, e.g.:

    outages scenario=restarts rounds=6 submitted=120 completed=120 unknown=0 lost=0 duplicated=0 stuck=0 exited=0 traffic_errors=0

- lost: tasks completed whose action never reached the sink;
- duplicated: actions that reached the sink more than once;
- stuck: tasks that did not end (completed, or denied after an unknown outcome);
- exited: daemons that did not survive.

Exit code 1 when any of those is not 0. Needs the PostgreSQL server binaries (initdb,
pg_ctl) and root or the postgres user; ``full-disk`` needs root (mount).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: tests.e2e helpers

from tests.e2e.daemons import DaemonProcess, wait_for
from tests.e2e.private_pg import PrivatePostgres, server_bindir
from tests.e2e.traffic import EchoThread, Traffic, fill, settled

Round = Callable[[int], None]  # one outage (and its end), given the round number


@contextlib.contextmanager
def private_database() -> Iterator[tuple[PrivatePostgres, str]]:
    """A throwaway cluster with a database ``soak``: the cluster and the database's URL."""
    bindir = server_bindir()
    if bindir is None:
        raise SystemExit("outages: no PostgreSQL server binaries (initdb, pg_ctl)")
    pg = PrivatePostgres(bindir)
    try:
        pg.create()
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            conn.execute("CREATE DATABASE soak")
        yield pg, pg.url.rsplit("/", 1)[0] + "/soak"
    finally:
        pg.destroy()


@contextlib.contextmanager
def small_fs(root: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs, unmounted afterwards."""
    mount = root / "fs"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise SystemExit(f"outages: cannot mount a tmpfs: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def run(nodes: list[DaemonProcess], outage: Round, rounds: int, gap: float,
        deny_unknown: bool = False) -> dict[str, int]:
    """Traffic through ``rounds`` outages; the counts."""
    with EchoThread() as echo:
        for node in nodes:
            node.start()
        with Traffic(nodes, echo.url("/hook"), deny_unknown=deny_unknown) as traffic:
            for n in range(rounds):
                time.sleep(gap)
                outage(n)
            time.sleep(gap)
        ids = list(traffic.submitted)
        done = True
        try:
            wait_for(lambda: settled(nodes, ids, traffic), "every task to end", timeout=180)
        except AssertionError:
            done = False
        sent = Counter(r.json()["n"] for r in echo.requests if r.path == "/hook")
        states = [str(nodes[0].task(task_id)["state"]) for task_id in ids]
    completed = [n for n, s in enumerate(states) if s == "completed"]
    ended = len(completed) + len(traffic.unknown)
    return {"rounds": rounds, "submitted": len(ids), "completed": len(completed),
            "unknown": len(traffic.unknown),
            "lost": sum(1 for n in completed if sent[n] == 0),
            "duplicated": sum(c - 1 for c in sent.values() if c > 1),
            "stuck": 0 if done else len(ids) - ended,
            "exited": sum(1 for node in nodes if node.proc and node.proc.poll() is not None),
            "traffic_errors": len(traffic.errors)}


def soak(scenario: str, rounds: int, gap: float) -> dict[str, int]:
    """Run one scenario; the counts."""
    root = Path(tempfile.mkdtemp(prefix="signoff-outages-"))
    nodes: list[DaemonProcess] = []
    try:
        if scenario == "full-disk":
            with small_fs(root) as fs:
                nodes = [DaemonProcess(root / "node", daemon={
                    "database": f"sqlite:///{fs / 'signoff.db'}", "heartbeat": "1s"})]

                def full(_: int) -> None:
                    filler = fill(fs)
                    time.sleep(gap)
                    filler.unlink()

                return run(nodes, full, rounds, gap)
        with private_database() as (pg, url):
            lease = "3s" if scenario == "paused" else "5s"
            nodes = [DaemonProcess(root / f"node{i}", daemon={
                "database": url, "heartbeat": "1s", "lease": lease}) for i in range(2)]

            def restart(n: int) -> None:
                pg.restart("fast" if n % 2 == 0 else "immediate")

            def pause(n: int) -> None:
                proc = nodes[n % 2].proc
                assert proc is not None
                proc.send_signal(signal.SIGSTOP)
                try:
                    time.sleep(8.0)  # past the 3 s lease and the leader's 8 s idle limit
                finally:
                    proc.send_signal(signal.SIGCONT)

            outage = pause if scenario == "paused" else restart
            return run(nodes, outage, rounds, gap, deny_unknown=scenario == "paused")
    finally:
        for node in nodes:
            node.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("restarts", "paused", "full-disk"),
                        default="restarts")
    parser.add_argument("--rounds", "--restarts", type=int, default=6,
                        help="how many outages")
    parser.add_argument("--gap", type=float, default=3.0,
                        help="seconds of traffic between two outages")
    args = parser.parse_args()
    counts = soak(args.scenario, args.rounds, args.gap)
    print(f"outages scenario={args.scenario} " + " ".join(f"{k}={v}"
                                                       for k, v in counts.items()))
    bad = ("lost", "duplicated", "stuck", "exited", "traffic_errors")
    return 1 if any(counts[k] for k in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
