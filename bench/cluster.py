"""Several nodes on one PostgreSQL: signoff against procrastinate and a raw psycopg queue.

Run: ``python bench/cluster.py [--tasks N] [--budget SECONDS] [--concurrency C]``
(PostgreSQL from ``SIGNOFF_TEST_POSTGRES``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``; needs the ``bench`` extra).

Every system works on its own fresh database, created and dropped here, on the same
server, in the same run, with the same number of tasks (default 2,000). Each figure is
tasks/s from the first submission to the last completion, submissions and work running
at the same time, with ``--concurrency`` (16) submitters in this process:

1. signoff, 1 and 2 nodes: real ``signoff daemon start`` subprocesses (default settings:
   4 consumers per node, LISTEN/NOTIFY wake-ups); one-step autonomous tasks (``list_dir``)
   submitted through ``POST /tasks`` (bench/posting.py, keep-alive), spread over the nodes in turn. Completion is counted
   in the database (``SELECT count(*) … WHERE state IN ('completed', 'failed')``) every
   0.1 s on one connection of this process — cheap, and it keeps polling off the
   daemons' event loops; a failed task aborts the bench.
2. procrastinate 3.10, 1 and 2 worker processes (concurrency 4 each, its own
   LISTEN/NOTIFY on): no-op jobs deferred with ``defer_async``; completion counted in
   ``procrastinate_jobs`` the same way.
3. raw psycopg, 1 and 2 worker processes: one ``INSERT`` per submission; a worker claims
   with ``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`` and
   finishes with one ``UPDATE``, each its own transaction; an empty queue is polled every
   5 ms. This is the ceiling: nothing but the queue.

Then the start latency of an idle node: one node with ``poll_interval = "60s"`` (so only
a NOTIFY can explain a quick start), 20 single tasks queued by this process through
signoff's engine (as another node's API would), 1 s apart; latency = submit call → the
task's row leaves ``queued`` (read every 1 ms). Target ≤ 100 ms (checked here only).

Each figure is the best of ``--repeat`` (3) runs, for every system alike, the runs
interleaved (each round runs every figure once). A run that does not drain within
``--budget`` seconds is reported with what it finished.
CPU: each run also sums the CPU time (utime + stime from /proc) of every process that did
its work, between the first submission and the last completion: the system's processes
(daemons or workers), the PostgreSQL backends serving its database (found in
``pg_stat_activity``; the counting connection left out) and this process (the
submitters). Per task, the least of the runs is printed for signoff 1 node and
procrastinate 1 worker as ``cpu_ms_per_task <system> = X`` (target signoff ≤
procrastinate).

Prints tasks/s for each system, the latency, the contract's three ratio lines, the CPU
lines, the machine, and ``ok`` when every target holds, ``over`` otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import procstat  # bench/procstat.py
import psycopg
import sqlalchemy as sa
from daemons import conninfo, fresh_database, start_daemons, stop  # bench/daemons.py
from posting import Poster  # bench/posting.py

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TASKS = 2_000
BUDGET = 180.0
CONCURRENCY = 16
REPEAT = 3
COUNT_EVERY = 0.1
LATENCY_SAMPLES = 20
LATENCY_TARGET_MS = 100.0
STEPS = [{"tool": "list_dir", "args": {"path": "."}}]


@dataclass(frozen=True)
class Cpu:
    """CPU seconds one run used: the system's own processes (daemons or workers), the
    PostgreSQL backends serving its database, and this process (the submitters)."""

    system: float
    postgres: float
    submitter: float
    commits: int = 0  # transactions committed in the bench database (pg_stat_database)

    @property
    def total(self) -> float:
        return self.system + self.postgres + self.submitter


COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
STATS_FLUSH = 1.2  # seconds: PostgreSQL 15 backends report their counts at most once a second
BACKENDS = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")


async def cpu_snapshot(conn: Any, pids: list[int]) -> dict[str, dict[int, float]]:
    """CPU seconds so far of the system's processes, of the PostgreSQL backends on the
    bench database (this counting connection's own left out), and of this process."""
    cur = await conn.execute(BACKENDS)
    backends = [int(row[0]) for row in await cur.fetchall()]
    return {"system": {p: procstat.cpu_seconds(p) for p in pids},
            "postgres": {p: procstat.cpu_seconds(p) for p in backends},
            "submitter": {0: procstat.own_cpu_seconds()}}


def cpu_used(start: dict[str, dict[int, float]], end: dict[str, dict[int, float]]) -> Cpu:
    """What each group used between two snapshots (a process born since counts from 0;
    one that ended meanwhile is lost — the pools keep their connections, so few do)."""
    used = {group: sum(max(0.0, cpu - start[group].get(pid, 0.0))
                       for pid, cpu in end[group].items()) for group in end}
    return Cpu(used["system"], used["postgres"], used["submitter"])


async def commits_so_far(conn: Any) -> int:
    """Transactions committed in the bench database so far, as the statistics say."""
    cur = await conn.execute(COMMITS)
    row = await cur.fetchone()
    return int(row[0]) if row else 0


@dataclass
class Figure:
    """One measured run."""

    label: str
    tasks: int
    done: int
    seconds: float
    submit_seconds: float
    cpu: Cpu = field(default_factory=lambda: Cpu(0.0, 0.0, 0.0))

    @property
    def cpu_ms_per_task(self) -> float:
        return self.cpu.total * 1000 / self.done if self.done else float("inf")

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        cut = "" if self.done == self.tasks else f"  BUDGET HIT: {self.done} of {self.tasks} done"
        return (f"{self.label:<26} {self.rate:8,.0f} tasks/s  ({self.done} in {self.seconds:.2f} s; "
                f"submissions took {self.submit_seconds:.2f} s){cut}")


async def drain(url: str, count_sql: str, tasks: int, submit: Callable[[int], Awaitable[None]],
                *, concurrency: int, budget: float, label: str,
                pids: list[int]) -> Figure:
    """Submit ``tasks`` with ``concurrency`` submitters while counting completions; the
    CPU of ``pids``, of the database's backends and of this process over the run."""
    queue = iter(range(tasks))

    async def submitter() -> None:
        for i in queue:
            await submit(i)

    async def submit_all() -> float:
        await asyncio.gather(*(submitter() for _ in range(concurrency)))
        return time.perf_counter() - began

    done = 0
    async with await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True) as conn:
        commits = await commits_so_far(conn)
        start = await cpu_snapshot(conn, pids)
        began = time.perf_counter()
        submitting = asyncio.create_task(submit_all())
        while time.perf_counter() - began < budget:
            cur = await conn.execute(count_sql)
            row = await cur.fetchone()
            done = int(row[0]) if row else 0
            if done >= tasks:
                break
            await asyncio.sleep(COUNT_EVERY)
        took = time.perf_counter() - began
        cpu = cpu_used(start, await cpu_snapshot(conn, pids))
        await asyncio.sleep(STATS_FLUSH)
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cpu = dataclasses.replace(cpu, commits=await commits_so_far(conn) - commits)
    if submitting.done():
        submit_s = submitting.result()
    else:
        submitting.cancel()
        await asyncio.gather(submitting, return_exceptions=True)
        submit_s = float("nan")
    return Figure(label, tasks, min(done, tasks), took, submit_s, cpu)


# -- processes ----------------------------------------------------------------------------
def start_helpers(kind: str, url: str, count: int) -> list[subprocess.Popen[bytes]]:
    """Worker processes of this script (``--worker KIND``); each prints "ready"."""
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", kind, "--url", url],
                              stdout=subprocess.PIPE) for _ in range(count)]
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != b"ready":
            stop(procs)
            raise SystemExit(f"a {kind} worker did not start")
    return procs


# -- signoff ------------------------------------------------------------------------------
async def run_signoff(base: str, nodes: int, args: argparse.Namespace) -> Figure:
    label = f"signoff {nodes} node{'s' if nodes > 1 else ''}"
    with fresh_database(base, "signoff") as url, tempfile.TemporaryDirectory() as tmp:
        daemons = start_daemons(url, nodes, Path(tmp))
        # Not aiohttp nor httpx: the submitter shares the two cores with what is measured,
        # and each of those costs far more client CPU per request (see bench/posting.py).
        posters = asyncio.Queue[Poster]()
        for _ in range(args.concurrency):
            posters.put_nowait(Poster())
        try:
            async def submit(i: int) -> None:
                poster = await posters.get()
                try:
                    status, body = await poster.post(f"{daemons[i % nodes][0]}/tasks",
                                                     {"goal": f"bench {i}", "steps": STEPS})
                finally:
                    posters.put_nowait(poster)
                if status != 202:
                    raise SystemExit(f"POST /tasks answered {status}: {body!r}")

            fig = await drain(url, "SELECT count(*) FROM tasks WHERE state IN "
                              "('completed', 'failed')", args.tasks, submit,
                              concurrency=args.concurrency, budget=args.budget, label=label,
                              pids=[p.pid for _, p in daemons])
            with psycopg.connect(conninfo(url)) as conn:
                row = conn.execute("SELECT count(*) FROM tasks WHERE state = 'failed'").fetchone()
            if row and row[0]:
                raise SystemExit(f"{row[0]} signoff task(s) failed: the figure means nothing")
        finally:
            while not posters.empty():
                await posters.get_nowait().close()
            stop([p for _, p in daemons])
    return fig


async def idle_latency(base: str) -> list[float]:
    """Milliseconds from a submission elsewhere to an idle node's claim (see docstring)."""
    from signoff.config.settings import Settings
    from signoff.runtime.models import Action
    from signoff.wiring import build_node

    with fresh_database(base, "latency") as url, tempfile.TemporaryDirectory() as tmp:
        daemons = start_daemons(url, 1, Path(tmp), poll_interval="60s")
        settings = Settings.model_validate({"daemon": {"work_dir": str(Path(tmp) / "submitter"),
                                                       "node_id": "bench-submitter"}})
        node = build_node(settings, database=url, surfaces={})
        await node.store.open()
        samples = []
        try:
            async with await psycopg.AsyncConnection.connect(conninfo(url),
                                                             autocommit=True) as conn:
                await asyncio.sleep(2)  # the node's start-up looks at the queue are over
                for _ in range(LATENCY_SAMPLES):
                    began = time.perf_counter()
                    task = await node.engine.submit(
                        "latency", steps=[Action(tool="list_dir", args={"path": "."})])
                    assert task is not None
                    while True:
                        cur = await conn.execute("SELECT state FROM tasks WHERE id = %s",
                                                 (task.id,))
                        row = await cur.fetchone()
                        if row and row[0] != "queued":
                            break
                        if time.perf_counter() - began > 30:
                            raise SystemExit("the idle node never started the task")
                        await asyncio.sleep(0.001)
                    samples.append((time.perf_counter() - began) * 1000)
                    await asyncio.sleep(1.0)
        finally:
            await node.store.close()
            stop([p for _, p in daemons])
    return samples


# -- procrastinate ------------------------------------------------------------------------
def procrastinate_app(url: str) -> Any:
    from cluster_jobs import make_app  # bench/ is on sys.path when this file runs

    return make_app(url, pool_size=CONCURRENCY + 4)


async def run_procrastinate(base: str, workers: int, args: argparse.Namespace) -> Figure:
    label = f"procrastinate {workers} worker{'s' if workers > 1 else ''}"
    with fresh_database(base, "procrastinate") as url:
        app = procrastinate_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            procs = start_helpers("procrastinate", url, workers)
            try:
                task = app.tasks["noop"]

                async def submit(i: int) -> None:
                    await task.defer_async()

                return await drain(url, "SELECT count(*) FROM procrastinate_jobs WHERE status "
                                   "IN ('succeeded', 'failed')", args.tasks, submit,
                                   concurrency=args.concurrency, budget=args.budget,
                                   label=label, pids=[p.pid for p in procs])
            finally:
                stop(procs)


def procrastinate_worker(url: str) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    app = procrastinate_app(url)

    async def main() -> None:
        async with app.open_async():
            print("ready", flush=True)
            await app.run_worker_async(concurrency=4, wait=True)

    asyncio.run(main())


# -- raw psycopg --------------------------------------------------------------------------
RAW_SCHEMA = ("CREATE TABLE jobs (id bigserial PRIMARY KEY, state text NOT NULL, "
              "payload text NOT NULL); CREATE INDEX ix_jobs_state_id ON jobs (state, id)")
RAW_CLAIM = ("UPDATE jobs SET state = 'running' WHERE id = (SELECT id FROM jobs WHERE "
             "state = 'queued' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, payload")


async def run_raw(base: str, workers: int, args: argparse.Namespace) -> Figure:
    label = f"raw psycopg {workers} worker{'s' if workers > 1 else ''}"
    with fresh_database(base, "raw") as url:
        with psycopg.connect(conninfo(url), autocommit=True) as conn:
            conn.execute(RAW_SCHEMA)
        procs = start_helpers("raw", url, workers)
        conns = [await psycopg.AsyncConnection.connect(conninfo(url), autocommit=True)
                 for _ in range(args.concurrency)]
        free = asyncio.Queue[Any]()
        for c in conns:
            free.put_nowait(c)
        try:
            async def submit(i: int) -> None:
                conn = await free.get()
                try:
                    await conn.execute("INSERT INTO jobs (state, payload) VALUES ('queued', %s)",
                                       (f'{{"goal": "bench {i}", "steps": 1}}',))
                finally:
                    free.put_nowait(conn)

            return await drain(url, "SELECT count(*) FROM jobs WHERE state = 'done'", args.tasks,
                               submit, concurrency=args.concurrency, budget=args.budget,
                               label=label, pids=[p.pid for p in procs])
        finally:
            for c in conns:
                await c.close()
            stop(procs)


def raw_worker(url: str) -> None:
    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        print("ready", flush=True)
        while not stopping[0]:
            row = conn.execute(RAW_CLAIM).fetchone()
            if row is None:
                time.sleep(0.005)
                continue
            conn.execute("UPDATE jobs SET state = 'done' WHERE id = %s", (row[0],))


# -- main ---------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "ok" if ok else "under"


async def measure(base: str, args: argparse.Namespace) -> None:
    # Best of --repeat runs, every system alike: on a shared machine a run is only ever
    # slowed by someone else's work, never sped up, so the fastest run is the one nearest
    # the system's own speed (timeit's rule). The runs are interleaved (each round runs
    # every figure once) because this machine's speed drifts over minutes: run one after
    # the other, the 1-node and 2-node figures were measured on different machines.
    runs = [(name, n, run) for n in (1, 2) for name, run in (
        ("raw", run_raw), ("procrastinate", run_procrastinate), ("signoff", run_signoff))]
    tries: dict[str, list[Figure]] = {f"{name}{n}": [] for name, n, _ in runs}
    for _ in range(args.repeat):
        for name, n, run in runs:
            tries[f"{name}{n}"].append(await run(base, n, args))
    figures: dict[str, Figure] = {}
    for key, figs in tries.items():
        fig = figures[key] = max(figs, key=lambda f: f.rate)
        print(fig.line() + (f"  (best of {args.repeat}: "
                            + ", ".join(f"{t.rate:,.0f}" for t in figs) + ")"
                            if args.repeat > 1 else ""), flush=True)
    latency = await idle_latency(base)
    median, worst = statistics.median(latency), max(latency)
    p90 = sorted(latency)[int(0.9 * (len(latency) - 1))]
    print(f"idle node start latency (NOTIFY, {len(latency)} samples): median {median:.1f} ms, "
          f"p90 {p90:.1f} ms, max {worst:.1f} ms; target <= {LATENCY_TARGET_MS:.0f} ms -> "
          f"{verdict(worst <= LATENCY_TARGET_MS)}")
    s1, s2 = figures["signoff1"].rate, figures["signoff2"].rate
    p1, r1 = figures["procrastinate1"].rate, figures["raw1"].rate
    ratios = ((f"signoff_1node/procrastinate_1worker = {s1 / p1:.3f}", s1 / p1 >= 1.0, ">= 1.0"),
              (f"signoff_2nodes/signoff_1node = {s2 / s1:.3f}", s2 / s1 >= 1.2, ">= 1.2"),
              (f"signoff_1node/raw = {s1 / r1:.3f}", s1 / r1 >= 0.35, ">= 0.35"))
    for text, ok, target in ratios:
        print(f"target {target}: {verdict(ok)}  ({text.split(' = ')[0]})")
    for text, _, _ in ratios:
        print(f"ratio {text}")
    cpu = {name: min(tries[f"{name}1"], key=lambda f: f.cpu_ms_per_task)
           for name in ("signoff", "procrastinate")}
    for name, fig in cpu.items():
        c, per = fig.cpu, 1000 / fig.done if fig.done else 0.0
        print(f"cpu per task, {name} 1: {fig.cpu_ms_per_task:.2f} ms = "
              f"{c.system * per:.2f} daemon or workers + {c.postgres * per:.2f} PostgreSQL "
              f"backends + {c.submitter * per:.2f} submitter; {c.commits * per / 1000:.1f} "
              f"PostgreSQL commits per task (least of {len(tries[name + '1'])})")
    cheaper = cpu["signoff"].cpu_ms_per_task <= cpu["procrastinate"].cpu_ms_per_task
    print(f"target signoff <= procrastinate: {verdict(cheaper)}  (cpu_ms_per_task)")
    for name, fig in cpu.items():
        print(f"cpu_ms_per_task {name} = {fig.cpu_ms_per_task:.3f}")
    print(procstat.machine())
    met = worst <= LATENCY_TARGET_MS and cheaper and all(ok for _, ok, _ in ratios)
    print("ok" if met else "over")


def main() -> None:
    """Measure, compare, report (or run one helper worker)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--budget", type=float, default=BUDGET,
                        help="seconds one run may take before it is cut short")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY,
                        help="submitters in this process")
    parser.add_argument("--repeat", type=int, default=REPEAT,
                        help="runs of each figure; the fastest is kept")
    parser.add_argument("--worker", choices=("procrastinate", "raw"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "procrastinate":
        procrastinate_worker(args.url)
        return
    if args.worker == "raw":
        raw_worker(args.url)
        return
    base = os.environ.get("SIGNOFF_TEST_POSTGRES", DEFAULT_PG)
    shown = sa.engine.make_url(base).render_as_string(hide_password=True)
    print(f"{args.tasks} one-step tasks per run, {args.concurrency} submitters, on {shown}; "
          f"each system on its own fresh database", flush=True)
    asyncio.run(measure(base, args))


if __name__ == "__main__":
    main()
