"""Worker throughput on SQLite against plain sqlite3 doing the same work, the simple way.

Run: ``python bench/throughput.py [--tasks N] [--profile]``.

1. signoff: a node on a SQLite file (WAL) with a tiny no-op READ tool registered. All
   tasks (three autonomous steps each) are submitted first with ``engine.submit``; then the
   real worker (``node.worker.run()``) runs in the background and the clock runs until the
   last task is completed (an engine listener counts completions; nothing polls).
   The store (`SqliteTaskStore`, which owns its one connection) counts the transactions it
   commits in both phases; a group commit of several units of work counts once.
2. baseline: plain ``sqlite3`` in WAL mode with synchronous=NORMAL, rows inserted
   untimed (like the submissions), then each task's two writes as the worker does them
   (claim the oldest queued row with UPDATE … RETURNING, then write the finished task's
   JSON), each in its own BEGIN IMMEDIATE … COMMIT: two commits per task.

Why the baseline is two commits per task and not "as many commits as signoff made": the
store group-commits concurrent units of work (`SqliteTaskStore`), so signoff makes fewer
commits than writes; a baseline sized by signoff's commit count would then do a fraction
of the work (1,000 one-statement commits standing for 2,000 tasks) and the ratio would
fall exactly when throughput rises. Before group commit the worker made two commits per
task, so the two definitions agree on earlier versions and their figures stay comparable.
The old, per-commit figure is still printed (``ratio_per_commit=``) for reference.

Prints tasks/s for both and, last, ``ratio=<signoff/baseline>`` (target >= 0.25). When the
ratio is under target (or with ``--profile``) it profiles a smaller run — the event loop
thread and the database thread separately — and prints where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.config.settings import Settings
from signoff.runtime.models import Action, Approval, RiskClass, Task
from signoff.runtime.store.sqlite.store import SqliteTaskStore
from signoff.runtime.tools.base import Param, ToolContext
from signoff.wiring import Node, build_node

TASKS = 2_000
STEPS = 3
TARGET = 0.25


class NoopTool:
    """A READ tool that does nothing (so only signoff's own overhead is measured)."""

    name = "noop"
    capability = "bench.noop"
    description = "Does nothing."
    params = (Param("n", int, required=False),)

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.READ

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return ()

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {}


@dataclass
class Completions:
    """An engine listener that fires when ``expected`` tasks have completed."""

    expected: int
    done: int = 0
    failed: list[str] = field(default_factory=list)
    all_done: asyncio.Event = field(default_factory=asyncio.Event)

    async def approval_requested(self, task: Task, approval: Approval) -> None:
        """Not expected here."""

    async def approval_decided(self, task: Task, approval: Approval) -> None:
        """Not expected here."""

    async def task_event(self, kind: str, task: Task, detail: str | None = None) -> None:
        """Count completions (and failures, which would make the figure meaningless)."""
        if kind == "completed":
            self.done += 1
        elif kind == "failed":
            self.failed.append(f"{task.id}: {detail}")
            self.done += 1
        if self.done >= self.expected:
            self.all_done.set()


@dataclass
class Run:
    """What one signoff run measured."""

    tasks: int
    submit_s: float
    work_s: float
    submit_commits: int
    work_commits: int
    task_json: str


def _node(work: Path) -> Node:
    settings = Settings.model_validate({"daemon": {"work_dir": str(work / "work"),
                                                   "node_id": "bench"}})
    node = build_node(settings, database=f"sqlite:///{work / 'signoff.db'}", platforms={})
    node.registry.register(NoopTool())
    node.worker.poll_interval = 0.01
    return node


async def run_signoff(tasks: int, work: Path) -> Run:
    """Submit ``tasks`` tasks, then let the real worker finish them; count commits."""
    node = _node(work)
    store = node.store
    assert isinstance(store, SqliteTaskStore)
    await store.open()

    def total() -> int:
        return store.commits

    listener = Completions(expected=tasks)
    node.listener.add(listener)
    steps = [Action(tool="noop", args={"n": i}) for i in range(STEPS)]
    began = time.perf_counter()
    for _ in range(tasks):
        await node.engine.submit("bench", steps=steps)
    submit_s = time.perf_counter() - began
    submit_commits = total()
    began = time.perf_counter()
    worker = asyncio.create_task(node.worker.run())
    try:
        await asyncio.wait_for(listener.all_done.wait(), timeout=600)
        work_s = time.perf_counter() - began
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    work_commits = total() - submit_commits
    if listener.failed:
        raise SystemExit(f"{len(listener.failed)} task(s) failed, e.g. {listener.failed[0]}")
    counts = await store.count_by_state()
    assert counts == {"completed": tasks}, counts
    page = await store.list_tasks(limit=1)
    sample = page.items[0]
    assert isinstance(sample, Task)
    await store.close()
    return Run(tasks, submit_s, work_s, submit_commits, work_commits, sample.model_dump_json())


def run_baseline(tasks: int, commits: int, task_json: str, work: Path) -> float:
    """Seconds plain sqlite3 needs for ``commits`` worker-shaped commits over ``tasks`` rows."""
    work.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(work / "baseline.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE tasks (seq INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, "
               "state TEXT NOT NULL, claimed_by TEXT, lease_until TEXT, version INT NOT NULL, "
               "data TEXT NOT NULL)")
    db.execute("CREATE INDEX ix_state_seq ON tasks (state, seq)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO tasks (id, state, version, data) VALUES (?, 'queued', 0, ?)",
                   [(f"t-{i}", task_json) for i in range(tasks)])
    db.execute("COMMIT")
    claimed: list[tuple[str, int]] = []
    began = time.perf_counter()
    for n in range(commits):
        db.execute("BEGIN IMMEDIATE")
        if n % 2 == 0 or not claimed:
            row = db.execute(
                "UPDATE tasks SET state='in_progress', claimed_by='bench', "
                "lease_until='2026-01-01T00:00:00', version=version+1 WHERE seq = "
                "(SELECT seq FROM tasks WHERE state='queued' ORDER BY seq LIMIT 1) "
                "AND state='queued' RETURNING id, version, data").fetchone()
            if row is not None:
                json.loads(row[2])  # signoff parses what it claims; so does the baseline
                claimed.append((row[0], row[1]))
        else:
            task_id, version = claimed.pop()
            db.execute("UPDATE tasks SET state='completed', claimed_by=NULL, version=version+1, "
                       "data=? WHERE id=? AND version=?", (task_json, task_id, version))
        db.execute("COMMIT")
    took = time.perf_counter() - began
    db.close()
    return took


def _thread_profiles(store_pool_threads: list[cProfile.Profile]) -> None:
    """Make every thread started from now on (the DB thread) run its own profiler."""

    def bootstrap(frame: Any, event: str, arg: Any) -> None:
        profile = cProfile.Profile()
        store_pool_threads.append(profile)
        profile.enable()  # replaces this bootstrap as the thread's profile function

    threading.setprofile(bootstrap)


def _top(stats: pstats.Stats, title: str, n: int = 14) -> str:
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(n)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return f"--- {title} (by own time) ---\n" + "\n".join(lines[start:start + n + 1])


FAMILIES = (  # (label, test on "filename:function"), first match wins
    ("waiting for work (idle)", lambda k: "SimpleQueue" in k or "epoll" in k),
    ("sqlite3 execute/commit (C)", lambda k: "sqlite3." in k),
    ("SQLAlchemy (build, compile, cache keys, results)", lambda k: "sqlalchemy" in k),
    ("pydantic (validate/serialize JSON)", lambda k: "pydantic" in k),
    ("signoff code", lambda k: "/signoff/" in k),
    ("asyncio / threads / sockets", lambda k: "asyncio" in k or "thread" in k or "socket" in k
     or "selectors" in k or "queue" in k),
)


def _by_family(stats: pstats.Stats) -> str:
    """Own time summed per library family, as shares of the thread's profiled time."""
    sums: dict[str, float] = {}
    total = 0.0
    for (filename, _line, function), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        key = f"{filename}:{function}"
        label = next((name for name, test in FAMILIES if test(key)), "other (json, hashlib, ...)")
        sums[label] = sums.get(label, 0.0) + own
        total += own
    rows = sorted(sums.items(), key=lambda kv: -kv[1])
    return "\n".join(f"  {share / total:6.1%}  {share:6.2f} s  {label}" for label, share in rows)


def profile(tasks: int) -> None:
    """Profile a smaller run: the event loop thread and the database thread."""
    db_profiles: list[cProfile.Profile] = []
    _thread_profiles(db_profiles)
    loop_profile = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp:
        loop_profile.enable()
        result = asyncio.run(run_signoff(tasks, Path(tmp)))
        loop_profile.disable()
    threading.setprofile(None)  # type: ignore[arg-type]
    print(f"\nprofile of {tasks} tasks ({result.work_s:.2f} s worker phase):")
    loop_stats = pstats.Stats(loop_profile)
    print("event loop thread, own time by family:")
    print(_by_family(loop_stats))
    if db_profiles:
        merged = pstats.Stats(db_profiles[0])
        for extra in db_profiles[1:]:
            merged.add(extra)
        print("database thread, own time by family:")
        print(_by_family(merged))
        print(_top(merged, "database thread: top functions"))


def main() -> None:
    """Measure, compare, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--profile", action="store_true", help="always profile")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run = asyncio.run(run_signoff(args.tasks, work))
        base_commits = 2 * args.tasks  # a claim and a final save per task
        base_s = run_baseline(args.tasks, base_commits, run.task_json, work / "per-task")
        same_s = run_baseline(args.tasks, run.work_commits, run.task_json, work / "per-commit")
    ours = run.tasks / run.work_s
    baseline = run.tasks / base_s
    per_task = (run.submit_commits + run.work_commits) / run.tasks
    print(f"tasks: {run.tasks} x {STEPS} autonomous no-op steps, SQLite file (WAL)")
    print(f"commits: submit {run.submit_commits} + worker {run.work_commits} "
          f"= {per_task:g} per task ({2 * run.tasks / run.work_commits:.1f} worker writes "
          f"per commit)")
    print(f"submit:   {run.tasks / run.submit_s:,.0f} tasks/s ({run.submit_s:.2f} s)")
    print(f"signoff:  {ours:,.0f} tasks/s (worker phase {run.work_s:.2f} s, "
          f"{run.work_s / run.work_commits * 1e6:,.0f} us per commit)")
    print(f"baseline: {baseline:,.0f} tasks/s (plain sqlite3, {base_commits} commits in "
          f"{base_s:.2f} s, {base_s / base_commits * 1e6:,.0f} us per commit)")
    print(f"ratio_per_commit={same_s / run.work_s:.3f} (plain sqlite3 making signoff's "
          f"{run.work_commits} commits, one write each, in {same_s:.2f} s)")
    ratio = ours / baseline
    if ratio < TARGET or args.profile:
        profile(min(args.tasks, 400))
    print(f"target: ratio >= {TARGET} -> {'ok' if ratio >= TARGET else 'under'}")
    print(f"ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
