"""Outside requests: POST /v1/approvals throughput, and how fast a waiting agent hears a decision.

Run: ``python bench/approvals.py [--requests N] [--concurrency C] [--decisions N]``.

1. A daemon-like server runs in a subprocess (``--serve``): the node from `build_node` on a
   SQLite file in a temporary directory, its worker and outbox running, the app from
   `create_app` on uvicorn — what `signoff daemon start` runs.
2. Throughput, from this process over C keep-alive connections: N ``GET /health`` (the
   baseline: no body, no store) and N ``POST /v1/approvals`` that the policy settles at
   once (READ ``read_file`` calls, each with its own Idempotency-Key, as the SDK sends
   them: stored, audited, answered 200 ALLOW). Three alternating rounds; the best round of
   each counts. Prints ``ratio approvals/health = X`` (target ≥ 0.5).
3. Decision → waiting agent: a SEND request is made, a long poll ``GET /v1/approvals/{id}
   ?wait=30s`` is parked on its own connection, then ``POST /approvals/{id}/approve`` is
   sent on another; the time from sending the decision to the long poll's answer arriving,
   over M requests. Prints p50/p99 (target p99 ≤ 25 ms).

The last line is ``ok`` when both targets are met, ``over`` otherwise; nothing gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.api import free_port, percentile, wait_ready
from signoff.config.settings import Settings

KEY = "bench-key-0123456789abcdef"
# The agent asks with its own key: an outside request is never approved by its asker.
AGENT_KEY = "bench-agent-key-0123456789abcdef"
REQUESTS = 3000
CONCURRENCY = 16
DECISIONS = 200
RATIO_TARGET = 0.5
P99_TARGET_MS = 25.0


def settings_for(root: Path) -> Settings:
    """The bench node's settings: its work and state dirs side by side inside ``root``."""
    return Settings.model_validate({"daemon": {"work_dir": str(root / "work"),
                                               "state_dir": str(root / "state"),
                                               "node_id": "bench"},
                                    "api": {"key": KEY, "keys": [
                                        {"name": "agent", "key": AGENT_KEY}]}})


async def serve(work_dir: Path, port: int) -> None:
    """The daemon-like server of step 1 (runs in the subprocess)."""
    import uvicorn

    from signoff.adapters.web import WebSurface
    from signoff.api.app import create_app
    from signoff.wiring import api_context, build_node

    settings = settings_for(work_dir)
    web = WebSurface()
    node = build_node(settings, surfaces={"web": web})
    await node.store.open()
    ctx = api_context(settings, store=node.store, engine=node.engine, decider=node.decider,
                      flow=node.flow, clock=node.clock, wake=node.worker.wake, web=web)
    app = create_app(ctx)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           lifespan="off", ws="none", access_log=False))
    async with asyncio.TaskGroup() as group:
        group.create_task(node.worker.run())
        group.create_task(node.flow.dispatcher.run())
        group.create_task(web.run(node.flow.on_decision))
        await server.serve()
        raise SystemExit(0)


async def rate(client: httpx.AsyncClient, count: int, concurrency: int, post: bool) -> float:
    """Requests per second for ``count`` calls spread over ``concurrency`` workers."""
    numbers = itertools.count()

    async def worker() -> None:
        while (n := next(numbers)) < count:
            if post:
                response = await client.post(
                    "/v1/approvals", headers={"Idempotency-Key": uuid.uuid4().hex},
                    json={"tool": "read_file", "args": {"path": f"docs/{n % 500}.md"},
                          "requester": "bench", "policy_id": f"bench-{n % 20}"})
                ok = response.status_code == 200 and response.json()["decision"] == "ALLOW"
            else:
                response = await client.get("/health")
                ok = response.status_code == 200
            if not ok:
                raise RuntimeError(f"{response.status_code} {response.text[:200]}")

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return count / (time.perf_counter() - started)


async def decision_latency(base: str, count: int) -> list[float]:
    """Milliseconds from sending a decision to the waiting long poll's answer."""
    headers = {"Authorization": f"Bearer {KEY}"}
    agent = {"Authorization": f"Bearer {AGENT_KEY}"}
    results = []
    async with (httpx.AsyncClient(base_url=base, headers=agent, timeout=60) as asker,
                httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as poller,
                httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as decider):
        for n in range(count + 10):
            made = await asker.post("/v1/approvals", json={
                "tool": "send_webhook", "args": {"url": f"https://hooks.example.com/{n}",
                                                 "payload": {}},
                "requester": "bench", "policy_id": f"latency-{n}"})
            approval_id = made.json()["id"]
            poll = asyncio.create_task(poller.get(f"/v1/approvals/{approval_id}",
                                                  params={"wait": "30s"}))
            await asyncio.sleep(0.02)  # let the poll reach the server and park there
            started = time.perf_counter()
            await decider.post(f"/approvals/{approval_id}/approve", json={"scope": "once"})
            answer = await poll
            elapsed = (time.perf_counter() - started) * 1000
            if answer.json()["status"] != "approved":
                raise RuntimeError(f"the long poll said {answer.text[:200]}")
            if n >= 10:  # the first few warm up connections and code paths
                results.append(elapsed)
    return results


async def measure(base: str, requests: int, concurrency: int,
                  decisions: int) -> tuple[float, float, list[float]]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits,
                                 timeout=60) as client:
        await rate(client, 200, concurrency, post=False)  # warm up both paths
        await rate(client, 200, concurrency, post=True)
        health, approvals = [], []
        for _ in range(3):
            health.append(await rate(client, requests, concurrency, post=False))
            approvals.append(await rate(client, requests, concurrency, post=True))
    latencies = await decision_latency(base, decisions)
    return max(health), max(approvals), latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--decisions", type=int, default=DECISIONS)
    parser.add_argument("--serve", nargs=2, metavar=("WORK_DIR", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(Path(args.serve[0]), int(args.serve[1])))
        return 0
    with tempfile.TemporaryDirectory(prefix="signoff-bench-approvals-") as tmp:
        port = free_port()
        process = subprocess.Popen([sys.executable, __file__, "--serve", tmp, str(port)],
                                   env={**os.environ, "PYTHONHASHSEED": "0"})
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(base, process)
            health, approvals, latencies = asyncio.run(
                measure(base, args.requests, args.concurrency, args.decisions))
        finally:
            process.terminate()
            process.wait(timeout=10)
    ratio = approvals / health
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(f"GET /health (baseline):              {health:8.0f} req/s")
    print(f"POST /v1/approvals (settled, ALLOW): {approvals:8.0f} req/s")
    print(f"ratio approvals/health = {ratio:.2f} (target >= {RATIO_TARGET})")
    print(f"decision -> waiting long poll answered: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
          f"over {len(latencies)} (target p99 <= {P99_TARGET_MS:.0f} ms)")
    print("ok" if ratio >= RATIO_TARGET and p99 <= P99_TARGET_MS else "over")
    return 0


if __name__ == "__main__":
    sys.exit(main())
