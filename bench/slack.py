"""Slack http mode: how fast a click is acked, and how fast the card is edited after it.

Run: ``python bench/slack.py``. Starts the fake Slack (tests/fakes/slack_api.py) and an
http-mode `SlackSurface` behind uvicorn on 127.0.0.1, then sends ~200 signed
``block_actions`` clicks one after another:

1. ack: click sent → HTTP 200 received, while the decision handler sleeps 5 s per click
   (a slow tool). Target: p99 ≤ 50 ms. Baseline: a bare POST to the same server.
2. edit: click sent → ``chat.update`` received by the fake, when the handler edits the
   card at once. Baseline: `update_card` called directly.

Prints the figures and their ratios to the baselines; the last line is ``ok`` when the
ack p99 meets the target and ``over`` otherwise.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from signoff.adapters.slack import SlackSurface
from signoff.bot.ports import ApprovalCard, CardRef, DecisionEvent, DecisionOutcome
from signoff.testing import sample_card
from tests.fakes.slack_api import (
    APPROVALS,
    BOT_TOKEN,
    SECRET,
    FakeSlack,
    block_actions_payload,
    signed_interaction,
)

CLICKS = 200
ACK_TARGET_MS = 50.0
SLOW_TOOL_S = 5.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def ping(request: Request) -> Response:
    await request.body()
    return PlainTextResponse("")


class Bench:
    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake
        self.platform = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                                      signing_secret=SECRET, api_url=fake.api_url)
        self.cards: dict[str, tuple[CardRef, ApprovalCard]] = {}
        self.mode = "slow"

    async def on_decision(self, event: DecisionEvent) -> DecisionOutcome:
        if self.mode == "slow":
            await asyncio.sleep(SLOW_TOOL_S)
        else:
            ref, card = self.cards[event.approval_id]
            await self.platform.update_card(ref, replace(
                card, status="approved", outcome=f"Approved once by {event.actor.key}"))
        return DecisionOutcome(True, "ok")

    async def click(self, client: httpx.AsyncClient, n: int) -> float:
        """Post one card, click Once on it; return the moment the click was sent."""
        card = sample_card(approval_id=f"ap{n:05d}")
        ref = await self.platform.post_card(card)
        self.cards[card.approval_id] = (ref, card)
        payload = block_actions_payload(channel=ref.channel, message_ts=ref.message_id,
                                        action_id="signoff_once", value=card.approval_id,
                                        message=self.fake.message(ref.channel, ref.message_id))
        body, headers = signed_interaction(SECRET, payload)
        started = time.perf_counter()
        response = await client.post("/slack/events", content=body, headers=headers)
        assert response.status_code == 200, response.text
        return started


async def measure(bench: Bench, client: httpx.AsyncClient) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"base": [], "ack": [], "edit": [], "update": []}
    for _ in range(CLICKS):  # baseline: the same server, no Slack work
        started = time.perf_counter()
        await client.post("/ping", content=b"x")
        out["base"].append(time.perf_counter() - started)
    bench.mode = "slow"
    for n in range(CLICKS):
        started = await bench.click(client, n)
        out["ack"].append(time.perf_counter() - started)
    bench.mode = "edit"
    for n in range(CLICKS, 2 * CLICKS):
        started = await bench.click(client, n)
        updates = await bench.fake.wait_for_calls("chat.update", n - CLICKS + 1)
        update = updates[-1]
        out["edit"].append(update.received_at - started)
    ref, card = bench.cards[f"ap{0:05d}"]
    for _ in range(CLICKS):  # baseline: the edit alone
        started = time.perf_counter()
        await bench.platform.update_card(ref, card)
        out["update"].append(time.perf_counter() - started)
    return out


def report(out: dict[str, list[float]]) -> bool:
    ms = {k: [v * 1000 for v in vs] for k, vs in out.items()}
    base50, base99 = percentile(ms["base"], 50), percentile(ms["base"], 99)
    ack50, ack99 = percentile(ms["ack"], 50), percentile(ms["ack"], 99)
    edit50, edit99 = percentile(ms["edit"], 50), percentile(ms["edit"], 99)
    upd50 = percentile(ms["update"], 50)
    print(f"clicks per phase              {CLICKS}")
    print(f"baseline POST          p50 {base50:7.2f} ms  p99 {base99:7.2f} ms")
    print(f"click -> ack (tool 5s) p50 {ack50:7.2f} ms  p99 {ack99:7.2f} ms"
          f"  (p99 {ack99 / base99:5.1f}x baseline; target p99 <= {ACK_TARGET_MS:.0f} ms)")
    print(f"click -> chat.update   p50 {edit50:7.2f} ms  p99 {edit99:7.2f} ms"
          f"  (p50 {edit50 / upd50:5.1f}x a bare update_card, {upd50:.2f} ms)")
    return ack99 <= ACK_TARGET_MS


async def main() -> int:
    async with FakeSlack() as fake:
        bench = Bench(fake)
        app = Starlette(routes=[Route("/slack/events", bench.platform.handle_http, methods=["POST"]),
                                Route("/ping", ping, methods=["POST"])])
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="off"))
        serving = asyncio.create_task(server.serve())
        running = asyncio.create_task(bench.platform.run(bench.on_decision))
        try:
            while not server.started:  # noqa: ASYNC110 - uvicorn offers only a flag
                await asyncio.sleep(0.01)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                out = await measure(bench, client)
        finally:
            running.cancel()  # also cancels the decisions still sleeping
            server.should_exit = True
            await asyncio.gather(running, serving, return_exceptions=True)
    ok = report(out)
    print("ok" if ok else "over")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
