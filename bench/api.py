"""HTTP API latency and daemon memory with 10,000 tasks waiting for approval.

Run: ``python bench/api.py [--tasks N] [--requests N]``.

1. Setup (untimed): a SQLite store in a temporary directory gets N tasks in
   ``waiting_approval``, each with its pending SEND action and approval request, inserted
   through the store's `commit` (one unit of work per task, as the engine writes them).
2. A daemon-like server runs in a subprocess (``--serve``): the node from `build_node` on
   that database, its worker and outbox running, the app from `create_app` on uvicorn.
3. From this process, one keep-alive connection measures, one request at a time:
   ``GET /approvals?status=pending&limit=50`` (paging through the oldest requests),
   ``GET /tasks/{id}`` (random ids), and the baseline ``GET /health`` (no store access).
4. The server's resident memory is read from ``/proc/<pid>/status`` (VmRSS, and VmHWM,
   the peak) after the requests.

Prints p50/p99 per route, their ratio to the /health baseline, RSS, and last ``ok`` when
both API p99s are under 50 ms and RSS is under 150 MB, ``over`` otherwise.

5. What a /metrics scrape costs as the history grows (``--finished N``, default 50,000):
   the gauges' refresh (`MetricsListener.render`, what the route runs) on the SQLite store
   of an empty database, then on the same database after N completed tasks were added,
   ``--scrapes`` times each, the node's FakeClock 15 s further per scrape (a Prometheus
   interval). Prints the p50 of both and their ratio (target: about 1, the same at any
   size: every scrape reads the counts the database keeps, store/sql/counts.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from signoff.config.settings import Settings
from signoff.runtime.models import Action, Approval, RunMode, Task, TaskState, utcnow
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import Change
from signoff.runtime.tools.registry import builtin_registry
from signoff.wiring import prepare_state

TASKS = 10_000
REQUESTS = 400
FINISHED = 50_000
SCRAPES = 200
P99_TARGET_MS = 50.0
RSS_TARGET_MB = 150.0
KEY = "bench-key-0123456789abcdef"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def settings_for(root: Path, database: str | None = None) -> Settings:
    """The bench node's settings: its work and state dirs side by side inside ``root``; its
    database a SQLite file in the state dir unless ``database`` (a URL) is given."""
    daemon = {"work_dir": str(root / "work"), "state_dir": str(root / "state"),
              "node_id": "bench", **({"database": database} if database else {})}
    return Settings.model_validate({"daemon": daemon, "api": {"key": KEY}})


def bench_database(root: Path, database: str | None = None) -> str:
    """The bench node's database URL, its state dir made."""
    settings = settings_for(root, database)
    prepare_state(settings)
    return settings.database_url()


async def populate(work_dir: Path, count: int, database: str | None = None) -> list[str]:
    """Insert ``count`` waiting tasks; return their ids."""
    store = make_store(bench_database(work_dir, database))
    await store.open()
    registry = builtin_registry(work_dir=work_dir)
    ids = []

    async def insert(i: int) -> str:
        action = registry.prepare(Action(tool="send_webhook", args={
            "url": f"https://hooks.example.com/team/{i % 50}",
            "payload": {"text": f"build {i} is green", "n": i}}))
        now = utcnow()
        task_id, approval_id = f"t-bench{i:06d}", f"a-bench{i:06d}"
        approval = Approval(id=approval_id, task_id=task_id, action=action,
                            requested_at=now, expires_at=now + timedelta(days=7))
        task = Task(id=task_id, goal=f"tell the team about build {i}",
                    state=TaskState.WAITING_APPROVAL, steps=[action], pending_action=action,
                    approval=approval, mode=RunMode.INTERACTIVE, submitted_by="web:bench",
                    created_at=now, updated_at=now)
        if not await store.commit(Change(at=now, task=task, insert=True, approval=approval)):
            raise RuntimeError(f"could not insert {task_id}")
        return task_id

    try:
        # 500 at a time: concurrent commits share one group commit (the order of the ids,
        # oldest first, is kept: each batch is requested after the one before).
        for start in range(0, count, 500):
            ids += await asyncio.gather(*(insert(i) for i in range(start,
                                                                   min(start + 500, count))))
    finally:
        await store.close()
    return ids


async def serve(work_dir: Path, port: int, database: str | None = None) -> None:
    """The daemon-like server of step 2 (runs in the subprocess)."""
    import uvicorn

    from signoff.adapters.web import WebSurface
    from signoff.api.app import create_app
    from signoff.wiring import api_context, build_node

    settings = settings_for(work_dir, database)
    web = WebSurface()
    node = build_node(settings, surfaces={"web": web})
    await node.store.open()
    ctx = api_context(settings, store=node.store, engine=node.engine,
                                   decider=node.decider, flow=node.flow, clock=node.clock,
                                   wake=node.worker.wake, web=web)
    app = create_app(ctx)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           lifespan="off", ws="none", access_log=False))
    async with asyncio.TaskGroup() as group:
        group.create_task(node.worker.run())
        group.create_task(node.flow.dispatcher.run())
        group.create_task(web.run(node.flow.on_decision))
        await server.serve()
        raise SystemExit(0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


def timed(client: httpx.Client, path: str) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    response = client.get(path)
    elapsed = (time.perf_counter() - start) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:200]}")
    return elapsed, response


def measure(base: str, ids: list[str], requests: int) -> dict[str, list[float]]:
    """Latencies in ms per route, one request at a time on one connection."""
    results: dict[str, list[float]] = {"health": [], "approvals": [], "task": []}
    rng = random.Random(7)
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for _ in range(30):  # warm up: connections, caches, lazy imports
            timed(client, "/health")
            timed(client, "/approvals?status=pending&limit=50")
            timed(client, f"/tasks/{rng.choice(ids)}")
        cursor = None
        for _ in range(requests):
            results["health"].append(timed(client, "/health")[0])
            path = "/approvals?status=pending&limit=50" + (f"&cursor={cursor}" if cursor else "")
            elapsed, response = timed(client, path)
            results["approvals"].append(elapsed)
            page = response.json()
            if len(page["items"]) != 50:
                raise RuntimeError(f"expected 50 pending approvals, got {len(page['items'])}")
            cursor = page["next_cursor"] if rng.random() < 0.5 else None  # deeper pages too
            results["task"].append(timed(client, f"/tasks/{rng.choice(ids)}")[0])
    return results


def wait_ready(base: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not start")


async def scrape_costs(work_dir: Path, finished: int, scrapes: int
                       ) -> tuple[list[float], list[float]]:
    """ms per scrape, empty and with ``finished`` rows."""
    from signoff.api.metrics import MetricsListener
    from signoff.runtime.clock import FakeClock

    store = make_store(bench_database(work_dir))
    await store.open()
    clock = FakeClock(utcnow())

    async def costs() -> list[float]:
        listener = MetricsListener()
        took = []
        for _ in range(scrapes):
            began = time.perf_counter()
            await listener.render(store, clock.now())
            took.append((time.perf_counter() - began) * 1000)
            clock.advance(15)
        return took

    try:
        empty = await costs()
        now = clock.now()
        for start in range(0, finished, 500):  # concurrent commits: one group commit each
            await asyncio.gather(*(store.commit(Change(at=now, insert=True, task=Task(
                id=f"t-done{i:07d}", goal="done", state=TaskState.COMPLETED, steps=[],
                created_at=now, updated_at=now))) for i in range(start,
                                                                 min(start + 500, finished))))
        full = await costs()
    finally:
        await store.close()
    return empty, full


def report_scrapes(work_dir: Path, finished: int, scrapes: int) -> None:
    empty, full = asyncio.run(scrape_costs(work_dir, finished, scrapes))
    s0, s1 = percentile(empty, 50), percentile(full, 50)
    print(f"/metrics scrape (gauges' refresh), p50 of {len(full)}: empty {s0:.2f} ms, "
          f"with {finished:,} finished tasks {s1:.2f} ms -> ratio {s1 / s0:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--finished", type=int, default=FINISHED)
    parser.add_argument("--scrapes", type=int, default=SCRAPES)
    # WORK_DIR PORT [DATABASE]: bench/pending.py serves PostgreSQL databases too.
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(Path(args.serve[0]), int(args.serve[1]), *args.serve[2:3]))
        return 0
    with tempfile.TemporaryDirectory(prefix="signoff-bench-api-") as tmp:
        work_dir = Path(tmp)
        started = time.perf_counter()
        ids = asyncio.run(populate(work_dir, args.tasks))
        print(f"setup: {len(ids)} waiting tasks inserted in {time.perf_counter() - started:.1f} s")
        port = free_port()
        process = subprocess.Popen([sys.executable, __file__, "--serve", str(work_dir),
                                    str(port)], env={**os.environ, "PYTHONHASHSEED": "0"})
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(base, process)
            results = measure(base, ids, args.requests)
            rss, peak = memory(process.pid)
        finally:
            process.terminate()
            process.wait(timeout=10)
    base_p99 = percentile(results["health"], 99)
    print(f"{'route':<44} {'p50 ms':>8} {'p99 ms':>8} {'p99/health':>11}")
    labels = {"health": "GET /health (baseline)",
              "approvals": "GET /approvals?status=pending&limit=50",
              "task": "GET /tasks/{id}"}
    for key, label in labels.items():
        p50, p99 = percentile(results[key], 50), percentile(results[key], 99)
        print(f"{label:<44} {p50:8.2f} {p99:8.2f} {p99 / base_p99:11.1f}")
    print(f"server RSS with {len(ids)} waiting tasks: {rss:.1f} MB (peak {peak:.1f} MB)")
    worst = max(percentile(results["approvals"], 99), percentile(results["task"], 99))
    good = worst < P99_TARGET_MS and rss < RSS_TARGET_MB
    print(f"targets: p99 < {P99_TARGET_MS:.0f} ms (worst {worst:.1f}), "
          f"RSS < {RSS_TARGET_MB:.0f} MB ({rss:.1f})")
    print("ok" if good else "over")
    with tempfile.TemporaryDirectory(prefix="signoff-bench-metrics-") as tmp:
        report_scrapes(Path(tmp), args.finished, args.scrapes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
