"""Coalescing: N identical requests share one card; one decision resumes all N tasks.

Run: ``python bench/coalesce.py [--identical N]`` (default 1,000).

A real node (``build_node``) on SQLite with a recording surface that stamps each posted
card and a no-op SEND tool that stamps each run. N tasks ask the same action; the outbox
posts their card(s); then one decision on the shared card (coalescing on), against one
decision per card for the same N requests with coalescing off, measured in the same run.
Reported: cards posted, and decision → last task's action started, with
``ratio coalesced/separate decision->last resume = X`` (absolute times swing on a shared
machine; the ratio does not).
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
from signoff.runtime.models import Action, RiskClass, Scope
from signoff.runtime.tools.base import Param, ToolContext
from signoff.testing import RecordingSurface
from signoff.wiring import build_node

REQUESTS = 1_000


@dataclass
class TimedSurface(RecordingSurface):
    """A RecordingSurface that stamps every post_card call."""

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
    platform = TimedSurface()
    node = build_node(settings, database=f"sqlite:///{work / (name + '.db')}",
                      surfaces={"recording": platform})
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
    parser.add_argument("--identical", type=int, default=REQUESTS)
    report_identical(parser.parse_args().identical)


if __name__ == "__main__":
    main()
