"""Soak: two daemons on a throwaway PostgreSQL cluster restarted again and again.

While SEND tasks are submitted to alternating nodes and approved as they come, the
cluster (one of this script's own, on a free port: the shared server is never touched)
is restarted ``--restarts`` times, alternating fast and immediate shutdowns. Then every
task is given time to finish, and the script prints counts, not times:

    outages restarts=6 submitted=120 completed=120 lost=0 duplicated=0 stuck=0 exited=0

- lost: approved tasks whose action never reached the sink;
- duplicated: actions that reached the sink more than once;
- stuck: tasks not completed at the end;
- exited: daemons that did not survive.

Exit code 1 when any of them is not 0. Needs the PostgreSQL server binaries (initdb,
pg_ctl) and root or the postgres user.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: tests.e2e helpers

from tests.e2e.daemons import DaemonProcess, wait_for
from tests.e2e.private_pg import PrivatePostgres, server_bindir
from tests.e2e.traffic import EchoThread, Traffic, settled


def soak(restarts: int, gap: float) -> dict[str, int]:
    """Run the soak; the counts."""
    bindir = server_bindir()
    if bindir is None:
        raise SystemExit("outages: no PostgreSQL server binaries (initdb, pg_ctl)")
    pg = PrivatePostgres(bindir)
    root = Path(tempfile.mkdtemp(prefix="signoff-outages-"))
    nodes: list[DaemonProcess] = []
    try:
        pg.create()
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            conn.execute("CREATE DATABASE soak")
        url = pg.url.rsplit("/", 1)[0] + "/soak"
        nodes = [DaemonProcess(root / f"node{i}", daemon={
            "database": url, "heartbeat": "1s", "lease": "5s"}) for i in range(2)]
        with EchoThread() as echo:
            for node in nodes:
                node.start()
            with Traffic(nodes, echo.url("/hook")) as traffic:
                for n in range(restarts):
                    time.sleep(gap)
                    pg.restart("fast" if n % 2 == 0 else "immediate")
                time.sleep(gap)
            ids = list(traffic.submitted)
            done = True
            try:
                wait_for(lambda: settled(nodes, ids), "every task to complete", timeout=180)
            except AssertionError:
                done = False
            sent = Counter(r.json()["n"] for r in echo.requests if r.path == "/hook")
            states = _states(nodes, ids)
        completed = sum(1 for s in states if s == "completed")
        return {"restarts": restarts, "submitted": len(ids), "completed": completed,
                "lost": sum(1 for n in range(len(ids)) if sent[n] == 0),
                "duplicated": sum(c - 1 for c in sent.values() if c > 1),
                "stuck": 0 if done else len(ids) - completed,
                "exited": sum(1 for node in nodes if node.proc and node.proc.poll() is not None),
                "traffic_errors": len(traffic.errors)}
    finally:
        for node in nodes:
            node.stop()
        pg.destroy()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _states(nodes: list[DaemonProcess], ids: list[str]) -> list[str]:
    return [str(nodes[0].task(task_id)["state"]) for task_id in ids]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=6)
    parser.add_argument("--gap", type=float, default=3.0,
                        help="seconds of traffic between two restarts")
    args = parser.parse_args()
    counts = soak(args.restarts, args.gap)
    print("outages " + " ".join(f"{k}={v}" for k, v in counts.items()))
    bad = ("lost", "duplicated", "stuck", "exited", "traffic_errors")
    return 1 if any(counts[k] for k in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
