"""Approval flow latency: request → card posted, and decision → action started.

Run: ``python bench/flow.py [--requests N] [--store sqlite|memory|both]``.

A real node (``build_node``) with a RecordingPlatform whose ``post_card`` records
``time.perf_counter()``, the outbox dispatcher and the worker running in the background
as in the daemon, and a no-op SEND tool that records when its ``run`` starts. For each of
N requests, one after another:

1. request → card: from the moment the task reaches ``waiting_approval`` (an engine
   listener placed first, called right after the commit) to ``post_card`` being called.
   The time from the start of ``engine.advance`` (evaluation + commit included) is shown
   too.
2. decision → action: from calling ``node.decider.decide(...)`` to the tool's ``run``
   starting (commit of the decision, hand-over to the worker, the gated action's own
   commit, then the call).

Absolute milliseconds swing 5x on a shared machine, so every figure is also given as a
ratio to a baseline measured in the same run on the same store: one bare store commit
(an audit event and an outbox job, as a card post writes) plus one bare
``post_card`` call on the same platform — the least any request → card could cost.
Targets (from 0.1's 5 ms / 25 ms on a ~0.6 ms baseline): p50 <= 8x and p99 <= 40x the
baseline's p50, for both figures. The SQLite store (the default deployment) is the one
checked; the in-memory store shows the flow's own overhead. Lines
``ratio <figure> p50/baseline = X`` are printed, the last line is ``ok`` or ``over``.

The coalescing case (``--identical N``, default 1,000; 0 skips it): N identical requests
on the SQLite store share one card, one decision on it resumes all N tasks. Reported:
cards posted, and decision → last task's action started, as a ratio to the same N
requests with coalescing off decided one card at a time in the same run
(``ratio coalesced/separate decision->last resume = X``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from signoff.bot.outbox import FOREVER
from signoff.bot.ports import ApprovalCard, CardRef
from signoff.config.settings import Settings
from signoff.runtime.events import audit_event
from signoff.runtime.models import Action, Approval, RiskClass, Scope, Task
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import Change, OutboxItem
from signoff.runtime.tools.base import Param, ToolContext
from signoff.testing import RecordingPlatform
from signoff.wiring import build_node

REQUESTS = 1_000
P50_RATIO, P99_RATIO = 8.0, 40.0


@dataclass
class TimedPlatform(RecordingPlatform):
    """A RecordingPlatform that stamps every post_card call."""

    posted_at: dict[str, float] = field(default_factory=dict)
    posted: dict[str, asyncio.Event] = field(default_factory=dict)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Stamp first, then record as usual."""
        self.posted_at[card.approval_id] = time.perf_counter()
        self.posted.setdefault(card.approval_id, asyncio.Event()).set()
        return await super().post_card(card)


class StartTool:
    """A no-op SEND tool that stamps the start of each run."""

    name = "notify_bench"
    capability = "bench.send"
    description = "Does nothing, but is gated (SEND)."
    params = (Param("n", int, required=False),)

    def __init__(self) -> None:
        self.started: list[float] = []
        self.ran = asyncio.Event()

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.SEND

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"n": args.get("n")}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return (str(args.get("n")),)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        self.started.append(time.perf_counter())
        self.ran.set()
        return {}


@dataclass
class Stamps:
    """An engine listener (placed first) stamping waits and completions."""

    waiting_at: dict[str, float] = field(default_factory=dict)
    finished: dict[str, asyncio.Event] = field(default_factory=dict)

    async def approval_requested(self, task: Task, approval: Approval) -> None:
        """The request is committed: the clock for request → card starts."""
        self.waiting_at[approval.id] = time.perf_counter()

    async def approval_decided(self, task: Task, approval: Approval) -> None:
        """Not timed."""

    async def task_event(self, kind: str, task: Task, detail: str | None = None) -> None:
        """Let the driver wait for the end of each task."""
        if kind in ("completed", "failed"):
            self.finished.setdefault(task.id, asyncio.Event()).set()


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] * 1000


@dataclass
class Figures:
    """Latencies of one run, in seconds."""

    store: str
    to_card: list[float]
    advance_to_card: list[float]
    to_action: list[float]
    baseline: list[float] = field(default_factory=list)

    def line(self, name: str, values: list[float]) -> str:
        base = pct(self.baseline, 50)
        return (f"  {name:<26} p50 {pct(values, 50):6.2f} ms ({pct(values, 50) / base:5.1f}x)"
                f"   p99 {pct(values, 99):6.2f} ms ({pct(values, 99) / base:5.1f}x)"
                f"   max {max(values) * 1000:7.2f} ms")

    def ratios(self) -> dict[str, float]:
        base = pct(self.baseline, 50)
        return {f"{name} {q}/baseline": pct(values, int(q[1:])) / base
                for name, values in (("request->card", self.to_card),
                                     ("decision->action", self.to_action))
                for q in ("p50", "p99")}

    def met(self) -> bool:
        return all(value <= (P50_RATIO if "p50" in name else P99_RATIO)
                   for name, value in self.ratios().items())


async def baseline(node: Any, platform: TimedPlatform, samples: int) -> list[float]:
    """Seconds for one bare commit (audit event + outbox job) plus one bare post_card."""
    task = Task(id="t-baseline", goal="baseline")
    card = None
    times = []
    for n in range(samples):
        began = time.perf_counter()
        event = audit_event("note", task, None, reason=str(n))
        item = OutboxItem(key=f"baseline:{n}", surface="none", kind="notify", payload={})
        assert await node.store.commit(Change(at=node.clock.now(), audit=[event],
                                              outbox=[item], outbox_done=[]))
        if card is None:
            from signoff.testing import sample_card
            card = sample_card()
        await platform.post_card(card)
        times.append(time.perf_counter() - began)
    return times


async def measure(kind: str, requests: int, work: Path, budget: float) -> Figures:
    """Run ``requests`` request/decision round trips on one node (at most ``budget`` s)."""
    settings = Settings.model_validate({"daemon": {"work_dir": str(work / kind),
                                                   "node_id": f"bench-{kind}"}})
    platform = TimedPlatform()
    store = MemTaskStore() if kind == "memory" else None
    node = build_node(settings, store=store, database=f"sqlite:///{work / (kind + '.db')}",
                      platforms={"recording": platform})
    tool = StartTool()
    node.registry.register(tool)
    stamps = Stamps()
    node.listener.listeners.insert(0, stamps)
    await node.store.open()
    base = await baseline(node, TimedPlatform(), min(requests, 500))
    background = [asyncio.create_task(node.worker.run()),
                  asyncio.create_task(node.flow.dispatcher.run())]
    to_card, advance_to_card, to_action = [], [], []
    deadline = time.perf_counter() + budget
    try:
        for n in range(requests):
            if time.perf_counter() > deadline:
                break
            task = await node.engine.submit("bench", steps=[Action(tool=tool.name,
                                                                   args={"n": n})], claim=True)
            assert task is not None
            began = time.perf_counter()
            task = await node.engine.advance(task)
            assert task.approval is not None, task.result
            approval_id = task.approval.id
            await asyncio.wait_for(platform.posted.setdefault(approval_id,
                                                              asyncio.Event()).wait(), 10)
            to_card.append(platform.posted_at[approval_id] - stamps.waiting_at[approval_id])
            advance_to_card.append(platform.posted_at[approval_id] - began)
            tool.ran.clear()
            began = time.perf_counter()
            result = await node.decider.decide(approval_id, Scope.ONCE, "web:bench")
            assert result.accepted, result.message
            await asyncio.wait_for(tool.ran.wait(), 10)
            to_action.append(tool.started[-1] - began)
            await asyncio.wait_for(stamps.finished.setdefault(task.id, asyncio.Event()).wait(),
                                   10)
    finally:
        for job in background:
            job.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await node.store.close()
    return Figures(kind, to_card, advance_to_card, to_action, base)


class CountingTool(StartTool):
    """A StartTool that says when it has run ``count`` times."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.all_ran = asyncio.Event()

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await super().run(args, ctx)
        if len(self.started) >= self.count:
            self.all_ran.set()
        return result


async def identical_requests(work: Path, count: int, *, coalesce: bool) -> tuple[int, float]:
    """``count`` identical requests: how many cards were posted, and seconds from the
    decision (one on the shared card, or one per card without coalescing) to the last
    task's action starting."""
    name = "coalesced" if coalesce else "separate"
    settings = Settings.model_validate({"daemon": {"work_dir": str(work / name),
                                                   "node_id": f"bench-{name}"},
                                        "approvals": {"coalesce": coalesce}})
    platform = TimedPlatform()
    node = build_node(settings, database=f"sqlite:///{work / (name + '.db')}",
                      platforms={"recording": platform})
    tool = CountingTool(count)
    node.registry.register(tool)
    await node.store.open()
    background = [asyncio.create_task(node.worker.run())]
    try:
        approvals = []
        for _ in range(count):
            task = await node.engine.submit("bench", steps=[Action(tool=tool.name,
                                                                   args={"n": 0})], claim=True)
            assert task is not None
            task = await node.engine.advance(task)
            assert task.approval is not None, task.result
            approvals.append(task.approval.id)
        while await node.store.due_outbox(FOREVER, limit=1):  # every card out first
            await node.flow.dispatcher.run_once()
        began = time.perf_counter()
        for approval_id in approvals[:1] if coalesce else approvals:
            result = await node.decider.decide(approval_id, Scope.ONCE, "web:bench")
            assert result.accepted, result.message
        await asyncio.wait_for(tool.all_ran.wait(), 300)
        return len(platform.posted_at), max(tool.started) - began
    finally:
        for job in background:
            job.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await node.store.close()


def report_identical(count: int) -> None:
    """The coalescing case against the same requests with coalescing off."""
    with tempfile.TemporaryDirectory() as tmp:
        cards, one_click = asyncio.run(identical_requests(Path(tmp), count, coalesce=True))
        separate_cards, clicks = asyncio.run(identical_requests(Path(tmp), count,
                                                                coalesce=False))
    print(f"coalescing, {count} identical requests (sqlite store):")
    print(f"  cards posted: {cards} (coalescing off: {separate_cards})")
    print(f"  decision -> last resume: {one_click:.2f} s for one decision "
          f"(coalescing off, one per card: {clicks:.2f} s)")
    print(f"ratio coalesced/separate decision->last resume = {one_click / clicks:.2f}")


def main() -> None:
    """Measure and report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--store", choices=["sqlite", "memory", "both"], default="both")
    parser.add_argument("--budget", type=float, default=25.0,
                        help="seconds per store; fewer requests are measured if exceeded")
    parser.add_argument("--identical", type=int, default=REQUESTS,
                        help="identical requests of the coalescing case (0: skip it)")
    args = parser.parse_args()
    kinds = ["memory", "sqlite"] if args.store == "both" else [args.store]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            began = time.perf_counter()
            figures = asyncio.run(measure(kind, args.requests, Path(tmp), args.budget))
            results[kind] = figures
            done = len(figures.to_card)
            cut = "" if done == args.requests else (
                f"; stopped after {done} of {args.requests} requests: time budget")
            print(f"{kind} store, {done} requests ({time.perf_counter() - began:.1f} s{cut}):")
            print(f"  {'baseline (commit + post)':<26} p50 {pct(figures.baseline, 50):6.2f} ms"
                  f"   p99 {pct(figures.baseline, 99):6.2f} ms")
            print(figures.line("request -> card posted", figures.to_card))
            print(figures.line("(advance start -> card)", figures.advance_to_card))
            print(figures.line("decision -> action started", figures.to_action))
    checked = results.get("sqlite") or results[kinds[0]]
    for name, value in checked.ratios().items():
        print(f"ratio {name} = {value:.2f}")
    verdict = "ok" if checked.met() else "over"
    print(f"{verdict} ({checked.store}; targets p50 <= {P50_RATIO:g}x and p99 <= "
          f"{P99_RATIO:g}x the baseline's p50)")
    if args.identical:
        report_identical(args.identical)


if __name__ == "__main__":
    main()
