"""Policy evaluation speed with 10,000 live grants, against hashing each action.

Run: ``python bench/policy.py [--evaluations N] [--grants G] [--budget S]``.

1. signoff: ``Policy.evaluate`` on prepared SEND actions (so every call reaches the grant
   lookup: half of them find a grant, half do not) with G live grants in a MemTaskStore.
2. baseline, in the same run: sha256 over each action's canonical JSON
   (``canonical_json({"tool", "args"})``), once per evaluation.

It also shows the same evaluations with an empty store (what the grant lookup costs) and
a profile of where the time goes. If the full run would exceed the time budget it stops
early and reports the rate it measured. The last line is
``ratio=<signoff time per decision / baseline time per hash>`` (target <= 3).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.runtime.models import Action, RunMode, Scope, Task, TaskState
from signoff.runtime.policy.grants import make_grant
from signoff.runtime.policy.policy import Policy
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import Change
from signoff.runtime.tools.canonical import canonical_json, sha256_hex
from signoff.runtime.tools.registry import builtin_registry

EVALUATIONS = 100_000
GRANTS = 10_000
DISTINCT = 200  # distinct actions evaluated, cycled
TARGET = 3.0
REGISTRY = builtin_registry(work_dir=Path("/srv/signoff-work"), entry_points_group=None)
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def email(n: int) -> Action:
    """A prepared e-mail to recipient n."""
    return REGISTRY.prepare(Action(tool="send_email", args={
        "to": f"person{n}@example.com", "subject": "Weekly report", "body": "Numbers inside."}))


def hook(n: int) -> Action:
    """A prepared webhook to URL n."""
    return REGISTRY.prepare(Action(tool="send_webhook", args={
        "url": f"https://hooks.example.com/{n}", "payload": {"n": n}}))


async def grant_store(grants: int, task: Task) -> MemTaskStore:
    """G live grants: always/session grants for many tasks, some for this task."""
    store = MemTaskStore()
    made = []
    for i in range(grants):
        owner = task if i % 50 == 0 else Task(id=f"t-{i % 997}", goal="g")
        action = email(i) if i % 2 else hook(i)
        scope = Scope.ALWAYS if i % 3 else Scope.SESSION
        made.append(make_grant(owner, action, scope, actor="slack:U1", now=NOW))
    assert await store.commit(Change(at=NOW, grants=made))
    return store


def workload(task: Task, store_grants: int) -> list[Action]:
    """DISTINCT actions: half granted to this task (ALLOW), half not (ASK_USER)."""
    granted = [i for i in range(0, store_grants, 50)][: DISTINCT // 2]
    hits = [email(i) if i % 2 else hook(i) for i in granted]
    misses = [email(store_grants + i) for i in range(DISTINCT - len(hits))]
    return [a for pair in zip(hits, misses, strict=False) for a in pair] or misses


async def evaluate_all(policy: Policy, task: Task, actions: list[Action], store: MemTaskStore,
                       count: int, budget: float) -> tuple[int, float, dict[str, int]]:
    """(evaluations done, seconds, verdict counts), stopping early past ``budget`` s."""
    verdicts: dict[str, int] = {}
    began = time.perf_counter()
    done = 0
    while done < count:
        for action in actions[: count - done]:
            ev = await policy.evaluate(task, action, store, now=NOW)
            verdicts[ev.verdict.value] = verdicts.get(ev.verdict.value, 0) + 1
        done += min(len(actions), count - done)
        if time.perf_counter() - began > budget:
            break
    return done, time.perf_counter() - began, verdicts


async def sqlite_rate(store: MemTaskStore, task: Task, actions: list[Action],
                      count: int) -> float:
    """Seconds per evaluation with the same grants in the SQLite store (indexed key)."""
    with tempfile.TemporaryDirectory() as tmp:
        sql = make_store(f"sqlite:///{tmp}/policy.db")
        await sql.open()
        try:
            assert await sql.commit(Change(at=NOW, grants=await store.list_grants()))
            began = time.perf_counter()
            for i in range(count):
                await Policy().evaluate(task, actions[i % len(actions)], sql, now=NOW)
            return (time.perf_counter() - began) / count
        finally:
            await sql.close()


def hash_all(actions: list[Action], count: int) -> float:
    """Seconds to sha256 the canonical JSON of ``count`` actions."""
    began = time.perf_counter()
    n = 0
    while n < count:
        for action in actions[: count - n]:
            sha256_hex(canonical_json({"tool": action.tool, "args": action.args}))
        n += min(len(actions), count - n)
    return time.perf_counter() - began


def profile(policy: Policy, task: Task, actions: list[Action], store: MemTaskStore,
            calls: int) -> str:
    """Where the time of ``calls`` evaluations goes, by own time."""
    prof = cProfile.Profile()

    async def go() -> None:
        for i in range(calls):
            await policy.evaluate(task, actions[i % len(actions)], store, now=NOW)

    prof.enable()
    asyncio.run(go())
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(8)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(lines[start:start + 9])


def main() -> None:
    """Measure and report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=EVALUATIONS)
    parser.add_argument("--grants", type=int, default=GRANTS)
    parser.add_argument("--budget", type=float, default=35.0,
                        help="seconds for the main run; it stops early past this")
    args = parser.parse_args()
    task = Task(id="t-bench", goal="bench", state=TaskState.IN_PROGRESS, steps=[],
                mode=RunMode.INTERACTIVE)
    policy = Policy()
    store = asyncio.run(grant_store(args.grants, task))
    actions = workload(task, args.grants)
    live = len(asyncio.run(store.list_grants()))

    done, took, verdicts = asyncio.run(evaluate_all(policy, task, actions, store,
                                                    args.evaluations, args.budget))
    base = hash_all(actions, done)
    empty_n, empty_s, _ = asyncio.run(evaluate_all(policy, task, actions, MemTaskStore(),
                                                   done, args.budget))
    per_eval, per_hash = took / done, base / done
    cut = "" if done == args.evaluations else (
        f" (stopped after {done:,} of {args.evaluations:,}: time budget; a full run would take"
        f" ~{per_eval * args.evaluations:,.0f} s)")
    print(f"{live:,} live grants in a MemTaskStore; {len(actions)} distinct SEND actions, "
          f"verdicts {verdicts}")
    print(f"signoff:  {done / took:,.0f} decisions/s, {per_eval * 1e6:,.1f} us each{cut}")
    print(f"baseline: {done / base:,.0f} hashes/s, {per_hash * 1e6:,.2f} us each "
          "(sha256 of canonical JSON)")
    print(f"same evaluations with an empty store: {empty_n / empty_s:,.0f} decisions/s, "
          f"{empty_s / empty_n * 1e6:,.1f} us each (ratio {empty_s / empty_n / per_hash:.2f})")
    print(f"grant lookup share of an evaluation: {1 - (empty_s / empty_n) / per_eval:.1%}")
    sql_each = asyncio.run(sqlite_rate(store, task, actions, 3_000))
    print(f"for reference, the SQLite store with the same grants: {1 / sql_each:,.0f} "
          f"decisions/s, {sql_each * 1e6:,.0f} us each (ratio {sql_each / per_hash:.1f}; "
          "3,000 evaluations)")
    ratio = per_eval / per_hash
    if ratio > TARGET:
        print("where the time goes (cProfile, 300 evaluations, by own time):")
        print(profile(policy, task, actions, store, 300))
    print(f"target: ratio <= {TARGET:g} -> {'ok' if ratio <= TARGET else 'over'}")
    print(f"ratio={ratio:.2f}")


if __name__ == "__main__":
    main()
