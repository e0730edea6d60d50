"""Policy evaluation speed with 10,000 live grants on the daemon's store, against hashing
each action.

Run: ``python bench/policy.py [--evaluations N] [--grants G] [--budget S]``.

1. signoff: ``Policy.evaluate`` on prepared SEND actions (so every call reaches the grant
   lookup: half of them find a grant, half do not) with G live grants in the store the
   daemon uses by default — ``make_store("sqlite:///<file>")``, i.e. `SqliteTaskStore`
   on a WAL file — opened and filled the way a daemon's store is (one commit).
2. baseline, in the same run: sha256 over each action's canonical JSON
   (``canonical_json({"tool", "args"})``), once per evaluation.

Also shown, for reference: the same evaluations on a MemTaskStore with the same grants,
on an empty MemTaskStore (what the policy costs without any lookup), and on PostgreSQL
(`PgTaskStore`, fewer evaluations) when ``SIGNOFF_TEST_POSTGRES`` names a database — each
with its ratio to the same baseline; and a profile of where the time goes when the ratio
is over target. If the full run would exceed the time budget it stops early and reports
the rate it measured. The last line is
``ratio=<signoff time per decision on SQLite / baseline time per hash>`` (target <= 3).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemons import fresh_database  # bench/ is on sys.path when this file runs

from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.models import Action, Grant, RunMode, Scope, Task, TaskState
from signoff.runtime.policy.grants import make_grant
from signoff.runtime.policy.net import NetRule
from signoff.runtime.policy.policy import Policy
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import Change, TaskStore
from signoff.runtime.tools.registry import builtin_registry

EVALUATIONS = 100_000
GRANTS = 10_000
DISTINCT = 200  # distinct actions evaluated, cycled
PG_EVALUATIONS = 3_000
TARGET = 3.0
REGISTRY = builtin_registry(work_dir=Path("/srv/signoff-work"), entry_points_group=None)
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class PublicAnswer:
    """A resolver that answers every name with one public address at once.

    The policy resolves a webhook's host on every evaluation (`NetRule.destination`); on
    a machine without DNS each lookup waits out its timeout (~100 ms), which would be all
    this bench measured. What a name costs to resolve is the resolver's, not the policy's.
    """

    async def resolve(self, host: str, port: int) -> tuple[str, ...]:
        """example.com's public address: a public destination, as for a real webhook."""
        return ("93.184.215.14",)


def daemon_policy() -> Policy:
    """The policy as the daemon builds it by default, with `PublicAnswer` for DNS."""
    return Policy(net=NetRule(resolver=PublicAnswer()))


def email(n: int) -> Action:
    """A prepared e-mail to recipient n."""
    return REGISTRY.prepare(Action(tool="send_email", args={
        "to": f"person{n}@example.com", "subject": "Weekly report", "body": "Numbers inside."}))


def hook(n: int) -> Action:
    """A prepared webhook to URL n."""
    return REGISTRY.prepare(Action(tool="send_webhook", args={
        "url": f"https://hooks.example.com/{n}", "payload": {"n": n}}))


def make_grants(grants: int, task: Task) -> list[Grant]:
    """G live grants: always/session grants for many tasks, some for this task."""
    made = []
    for i in range(grants):
        owner = task if i % 50 == 0 else Task(id=f"t-{i % 997}", goal="g")
        action = email(i) if i % 2 else hook(i)
        scope = Scope.ALWAYS if i % 3 else Scope.SESSION
        made.append(make_grant(owner, action, scope, actor="slack:U1", now=NOW))
    return made


@asynccontextmanager
async def filled(url: str | None, grants: list[Grant]) -> AsyncIterator[TaskStore]:
    """The store for ``url`` (None: a MemTaskStore), opened, emptied, holding ``grants``
    (``url`` is always a scratch database: a file of this run, or `fresh_database`)."""
    store: TaskStore = MemTaskStore() if url is None else make_store(url)
    await store.open()
    try:
        await store.reset()
        if grants:
            assert await store.commit(Change(at=NOW, grants=grants))
        yield store
    finally:
        await store.close()


def workload(task: Task, store_grants: int) -> list[Action]:
    """DISTINCT actions: half granted to this task (ALLOW), half not (ASK_USER)."""
    granted = [i for i in range(0, store_grants, 50)][: DISTINCT // 2]
    hits = [email(i) if i % 2 else hook(i) for i in granted]
    misses = [email(store_grants + i) for i in range(DISTINCT - len(hits))]
    return [a for pair in zip(hits, misses, strict=False) for a in pair] or misses


async def evaluate_all(policy: Policy, task: Task, actions: list[Action], store: TaskStore,
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


async def measure(url: str | None, grants: list[Grant], task: Task, actions: list[Action],
                  count: int, budget: float) -> tuple[int, float, dict[str, int], str]:
    """`evaluate_all` on a filled store of ``url``, and the store's class name."""
    async with filled(url, grants) as store:
        done = await evaluate_all(daemon_policy(), task, actions, store, count, budget)
        return (*done, type(store).__name__)


def hash_all(actions: list[Action], count: int) -> float:
    """Seconds to sha256 the canonical JSON of ``count`` actions."""
    began = time.perf_counter()
    n = 0
    while n < count:
        for action in actions[: count - n]:
            sha256_hex(canonical_json({"tool": action.tool, "args": action.args}))
        n += min(len(actions), count - n)
    return time.perf_counter() - began


def profile(url: str, grants: list[Grant], task: Task, actions: list[Action],
            calls: int) -> str:
    """Where the time of ``calls`` evaluations on the store of ``url`` goes, by own time."""
    prof = cProfile.Profile()

    async def go() -> None:
        async with filled(url, grants) as store:
            policy = daemon_policy()
            for action in actions:  # the first read of each key is not what is profiled
                await policy.evaluate(task, action, store, now=NOW)
            prof.enable()
            for i in range(calls):
                await policy.evaluate(task, actions[i % len(actions)], store, now=NOW)
            prof.disable()

    asyncio.run(go())
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(8)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(lines[start:start + 9])


def _line(label: str, done: int, took: float, per_hash: float, note: str = "") -> str:
    each = took / done
    return (f"{label}: {done / took:,.0f} decisions/s, {each * 1e6:,.1f} us each "
            f"(ratio {each / per_hash:.2f}){note}")


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
    grants = make_grants(args.grants, task)
    actions = workload(task, args.grants)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/policy.db"
        done, took, verdicts, kind = asyncio.run(measure(url, grants, task, actions,
                                                   args.evaluations, args.budget))
        base = hash_all(actions, done)
        per_eval, per_hash = took / done, base / done
        mem = asyncio.run(measure(None, grants, task, actions, done, args.budget))
        empty = asyncio.run(measure(None, [], task, actions, done, args.budget))
        cut = "" if done == args.evaluations else (
            f" (stopped after {done:,} of {args.evaluations:,}: time budget; a full run"
            f" would take ~{per_eval * args.evaluations:,.0f} s)")
        print(f"{len(grants):,} live grants in a {kind} (SQLite file, WAL: the daemon's "
              f"default store); {len(actions)} distinct SEND actions, verdicts {verdicts}")
        print(f"signoff:  {done / took:,.0f} decisions/s, {per_eval * 1e6:,.1f} us each{cut}")
        print(f"baseline: {done / base:,.0f} hashes/s, {per_hash * 1e6:,.2f} us each "
              "(sha256 of canonical JSON)")
        print(_line("same grants in a MemTaskStore", mem[0], mem[1], per_hash))
        print(_line("an empty MemTaskStore (no grant to find)", empty[0], empty[1], per_hash))
        pg = os.environ.get("SIGNOFF_TEST_POSTGRES")
        if pg:
            with fresh_database(pg, "policy") as scratch:
                n, s, _, pg_kind = asyncio.run(measure(scratch, grants, task, actions,
                                                       PG_EVALUATIONS, args.budget))
            print(_line(f"for reference, PostgreSQL ({pg_kind})", n, s, per_hash,
                        f"; {n:,} evaluations"))
        ratio = per_eval / per_hash
        if ratio > TARGET:
            print("where the time goes (cProfile, 300 evaluations, by own time):")
            print(profile(url, grants, task, actions, 300))
    print(f"target: ratio <= {TARGET:g} -> {'ok' if ratio <= TARGET else 'over'}")
    print(f"ratio={ratio:.2f}")


if __name__ == "__main__":
    main()
