"""100,000 pending requests: what a person's everyday calls cost when nobody has decided.

Run: ``python bench/pending.py [--pending N] [--small M] [--requests R] [--postgres URL]``.

On two fresh databases — one with M (default 100) pending requests, one with N (default
100,000) — SQLite files, or with ``--postgres`` two new databases on that server (made
and dropped by the bench; the URL names the server, e.g. ``SIGNOFF_TEST_POSTGRES``):

1. Setup (untimed): the tasks waiting for approval are inserted through the store's
   `commit`, 500 at a time (bench/api.py's `populate`, group commits).
2. For each database, the daemon-like server of bench/api.py runs in a subprocess: the
   node from `build_node`, its worker, outbox and web surface running, the app on
   uvicorn. It starts with all of them pending, as a daemon restarted with that backlog.
3. From this process, one keep-alive connection per server, one request at a time, R
   rounds of: ``GET /approvals?status=pending&limit=50`` (the listing), ``GET /`` as a
   browser (the console's first page), ``GET /metrics`` (a scrape) and
   ``POST /approvals/{id}/deny`` (a decision on the oldest still pending: no effect
   runs) — each call made to the small server and then to the large one, so that the
   other work of a shared machine weighs on both sides of a ratio alike.
4. The large server's resident memory (VmRSS, and VmHWM: the peak) after the requests.

Prints each call's p50 at M and at N and ``ratio <call> N/M = X`` (target ≤ 2: flat),
the RSS at N (target ≤ 200 MB), and ``ok`` when every target holds, ``over`` otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.api import KEY, free_port, memory, percentile, populate, wait_ready

PENDING = 100_000
SMALL = 100
REQUESTS = 60
RATIO_TARGET = 2.0
RSS_TARGET_MB = 200.0
CALLS = ("listing", "console", "metrics", "decision")


def _timed(client: httpx.Client, method: str, path: str, **kwargs: object) -> float:
    start = time.perf_counter()
    response = client.request(method, path, **kwargs)  # type: ignore[arg-type]
    elapsed = (time.perf_counter() - start) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:200]}")
    return elapsed


def measure(servers: list[tuple[str, list[str]]], requests: int
            ) -> list[dict[str, list[float]]]:
    """ms per call for each server (its base URL and pending ids), one request at a time
    on one keep-alive connection each, every call made to each server in turn."""
    results: list[dict[str, list[float]]] = [{c: [] for c in CALLS} for _ in servers]
    undecided = [[f"a-bench{int(i.removeprefix('t-bench')):06d}" for i in ids]
                 for _, ids in servers]
    headers = {"Authorization": f"Bearer {KEY}"}
    html = {"Accept": "text/html"}
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(httpx.Client(base_url=base, headers=headers,
                                                    timeout=60)) for base, _ in servers]
        for client in clients:
            for _ in range(5):  # warm up: connections, templates, lazy imports
                _timed(client, "GET", "/approvals?status=pending&limit=50")
                _timed(client, "GET", "/", headers=html)
                _timed(client, "GET", "/metrics")
        calls: dict[str, Callable[[httpx.Client, list[str]], float]] = {
            "listing": lambda c, _: _timed(c, "GET", "/approvals?status=pending&limit=50"),
            "console": lambda c, _: _timed(c, "GET", "/", headers=html),
            "metrics": lambda c, _: _timed(c, "GET", "/metrics"),
            "decision": lambda c, left: _timed(c, "POST", f"/approvals/{left.pop(0)}/deny",
                                               json={"reason": "bench"}),
        }
        for _ in range(requests):
            for call, make in calls.items():
                for n, client in enumerate(clients):
                    results[n][call].append(make(client, undecided[n]))
    return results


@contextlib.contextmanager
def database(postgres: str | None) -> Iterator[str | None]:
    """A new PostgreSQL database on the server of ``postgres`` (dropped afterwards), or
    None: the SQLite file of the bench node's state dir."""
    if postgres is None:
        yield None
        return
    import psycopg
    import sqlalchemy as sa

    base = sa.engine.make_url(postgres)
    name = f"signoff_bench_pending_{secrets.token_hex(4)}"
    admin = dict(host=base.host or "127.0.0.1", port=base.port or 5432, user=base.username,
                 password=base.password, dbname=base.database or "postgres", autocommit=True)
    with psycopg.connect(**admin) as conn:  # type: ignore[arg-type]
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(**admin) as conn:  # type: ignore[arg-type]
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


@contextlib.contextmanager
def server(count: int, postgres: str | None) -> Iterator[tuple[str, list[str], int]]:
    """A server on a new database with ``count`` pending: (base URL, ids, its pid)."""
    with tempfile.TemporaryDirectory(prefix="signoff-bench-pending-") as tmp, \
            database(postgres) as url:
        work_dir = Path(tmp)
        started = time.perf_counter()
        ids = asyncio.run(populate(work_dir, count, url))
        print(f"setup: {len(ids):,} pending requests in {time.perf_counter() - started:.1f} s")
        port = free_port()
        process = subprocess.Popen([sys.executable, str(Path(__file__).parent / "api.py"),
                                    "--serve", str(work_dir), str(port), *([url] if url else [])],
                                   env={**os.environ, "PYTHONHASHSEED": "0"})
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(base, process, timeout=300)
            yield base, ids, process.pid
        finally:
            process.terminate()
            process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=PENDING)
    parser.add_argument("--small", type=int, default=SMALL)
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--postgres", metavar="URL", help="a PostgreSQL server's URL "
                        "(postgresql+psycopg://…): new databases on it instead of SQLite")
    args = parser.parse_args()
    if args.small < args.requests + 5:
        parser.error("--small must hold a request to decide for every round (and 5 more)")
    with server(args.small, args.postgres) as (small_base, small_ids, _), \
            server(args.pending, args.postgres) as (large_base, large_ids, pid):
        small, large = measure([(small_base, small_ids), (large_base, large_ids)],
                               args.requests)
        rss, peak = memory(pid)
    print(f"database: {'PostgreSQL' if args.postgres else 'SQLite'}")
    good = True
    print(f"{'call':<10} {'p50 ms @' + format(args.small, ','):>14} "
          f"{'p50 ms @' + format(args.pending, ','):>16}")
    for call in CALLS:
        a, b = percentile(small[call], 50), percentile(large[call], 50)
        print(f"{call:<10} {a:14.2f} {b:16.2f}")
    for call in CALLS:
        ratio = percentile(large[call], 50) / percentile(small[call], 50)
        good = good and ratio <= RATIO_TARGET
        print(f"ratio {call} {args.pending}/{args.small} = {ratio:.2f} "
              f"(target <= {RATIO_TARGET:.0f})")
    print(f"server RSS with {args.pending:,} pending: {rss:.1f} MB (peak {peak:.1f} MB; "
          f"target <= {RSS_TARGET_MB:.0f} MB)")
    good = good and rss <= RSS_TARGET_MB
    print("ok" if good else "over")
    return 0


if __name__ == "__main__":
    sys.exit(main())
