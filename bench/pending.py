"""100,000 pending requests: what a person's everyday calls cost when nobody has decided.

Run: ``python bench/pending.py [--pending N] [--small M] [--requests R]``.

Twice, on a fresh SQLite database each time — first with M (default 100) pending requests,
then with N (default 100,000):

1. Setup (untimed): the tasks waiting for approval are inserted through the store's
   `commit`, 500 at a time (bench/api.py's `populate`, group commits).
2. The daemon-like server of bench/api.py runs in a subprocess on that database: the node
   from `build_node`, its worker, outbox and web surface running, the app on uvicorn.
   It starts with all of them pending, as a daemon restarted with that backlog does.
3. From this process, one keep-alive connection, one request at a time, R rounds of:
   ``GET /approvals?status=pending&limit=50`` (the listing), ``GET /`` as a browser (the
   console's first page), ``GET /metrics`` (a scrape) and ``POST /approvals/{id}/deny``
   (a decision on the oldest still pending: no effect runs).
4. The server's resident memory (VmRSS, and VmHWM: the peak) after the requests.

Prints each call's p50 at M and at N and ``ratio <call> N/M = X`` (target ≤ 2: flat),
the RSS at N (target ≤ 200 MB), and ``ok`` when every target holds, ``over`` otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
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


def measure(base: str, ids: list[str], requests: int) -> dict[str, list[float]]:
    """ms per call, one request at a time on one keep-alive connection."""
    results: dict[str, list[float]] = {c: [] for c in CALLS}
    undecided = [f"a-bench{int(i.removeprefix('t-bench')):06d}" for i in ids]
    headers = {"Authorization": f"Bearer {KEY}"}
    html = {"Accept": "text/html"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        for _ in range(5):  # warm up: connections, templates, lazy imports
            _timed(client, "GET", "/approvals?status=pending&limit=50")
            _timed(client, "GET", "/", headers=html)
            _timed(client, "GET", "/metrics")
        for _ in range(requests):
            results["listing"].append(
                _timed(client, "GET", "/approvals?status=pending&limit=50"))
            results["console"].append(_timed(client, "GET", "/", headers=html))
            results["metrics"].append(_timed(client, "GET", "/metrics"))
            results["decision"].append(_timed(
                client, "POST", f"/approvals/{undecided.pop(0)}/deny",
                json={"reason": "bench"}))
    return results


def run(pending: int, requests: int) -> tuple[dict[str, list[float]], float, float]:
    """Latencies and (RSS, peak) in MB with ``pending`` requests waiting."""
    with tempfile.TemporaryDirectory(prefix="signoff-bench-pending-") as tmp:
        work_dir = Path(tmp)
        started = time.perf_counter()
        ids = asyncio.run(populate(work_dir, pending))
        print(f"setup: {len(ids):,} pending requests in {time.perf_counter() - started:.1f} s")
        port = free_port()
        process = subprocess.Popen([sys.executable, str(Path(__file__).parent / "api.py"),
                                    "--serve", str(work_dir), str(port)],
                                   env={**os.environ, "PYTHONHASHSEED": "0"})
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(base, process, timeout=300)
            results = measure(base, ids, requests)
            rss, peak = memory(process.pid)
        finally:
            process.terminate()
            process.wait(timeout=30)
    return results, rss, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=PENDING)
    parser.add_argument("--small", type=int, default=SMALL)
    parser.add_argument("--requests", type=int, default=REQUESTS)
    args = parser.parse_args()
    if args.small < args.requests + 5:
        parser.error("--small must hold a request to decide for every round (and 5 more)")
    small, _, _ = run(args.small, args.requests)
    large, rss, peak = run(args.pending, args.requests)
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
