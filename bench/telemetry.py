"""What OpenTelemetry costs a decision: off (the default) and on, against a baseline.

Run: ``python bench/telemetry.py [--decisions N] [--rounds R]``.

One in-process node per variant (`build_node` on a SQLite file, the app from
`create_app` through httpx's ASGI transport, worker and outbox running), each timing N
outside requests (SEND, so a person decides) asked with an agent key and approved with the
admin key — the request, its card and its decision:

- ``baseline``: no ``traceparent`` header, telemetry off;
- ``off``: the caller sends a ``traceparent`` (kept on the request), telemetry off — the
  only telemetry code that runs when it is off;
- ``on``: ``[telemetry] enabled`` with the SDK's batch span processor and an in-memory
  exporter (the export itself is the collector's cost, not ours).

Rounds alternate the variants; the best round of each counts. Prints ``ratio
telemetry_off/baseline = X`` (target ≤ 1.05: no measurable cost when off) and ``ratio
telemetry_on/off = Y`` (for reference), then ``ok`` or ``over``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from signoff.adapters.web.surface import WebSurface
from signoff.api.app import create_app
from signoff.config.settings import Settings
from signoff.runtime.telemetry import Telemetry
from signoff.wiring import api_context, build_node

KEY = "bench-key-0123456789abcdef"
AGENT_KEY = "bench-agent-key-0123456789abcdef"
TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
ASK = {"tool": "send_email", "policy_id": "bench", "requester": "bench",
       "args": {"to": "john@example.com", "subject": "hi", "body": "x"}}
OFF_TARGET = 1.05


def in_memory() -> tuple[Any, Any]:
    """A telemetry listener exporting (in batches) to memory, as a daemon would to OTLP."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    return tracer, MeterProvider(metric_readers=[InMemoryMetricReader()])


async def one_round(root: Path, variant: str, decisions: int) -> float:
    """Seconds per decision for one variant on a fresh node."""
    settings = Settings.model_validate({
        "daemon": {"work_dir": str(root / "work"), "state_dir": str(root / "state"),
                   "node_id": "bench"},
        "api": {"key": KEY, "keys": [{"name": "agent", "key": AGENT_KEY}]}})
    telemetry = None
    providers: Any = None
    if variant == "on":
        providers = in_memory()
        from signoff.runtime.store.factory import make_store

        store = make_store(settings.database_url())
        telemetry = Telemetry(store=store, tracer_provider=providers[0],
                              meter_provider=providers[1], node_id="bench")
    web = WebSurface()
    if telemetry is not None:
        node = build_node(settings, store=store, telemetry=telemetry, surfaces={"web": web})
    else:
        node = build_node(settings, surfaces={"web": web})
    await node.store.open()
    ctx = api_context(settings, store=node.store, engine=node.engine, decider=node.decider,
                      flow=node.flow, clock=node.clock, wake=node.worker.wake, web=web)
    app = create_app(ctx)
    tasks = [asyncio.create_task(node.worker.run()),
             asyncio.create_task(node.flow.dispatcher.run()),
             asyncio.create_task(web.run(node.flow.on_decision))]
    headers = dict(TRACE) if variant != "baseline" else {}
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                     headers={"Authorization": f"Bearer {AGENT_KEY}"}) as agent, \
                httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                  headers={"Authorization": f"Bearer {KEY}"}) as admin:
            start = time.perf_counter()
            for _ in range(decisions):
                asked = await agent.post("/v1/approvals", json=ASK, headers=headers)
                answer = await admin.post(f"/approvals/{asked.json()['id']}/approve",
                                          json={"scope": "once"})
                assert answer.status_code == 200, answer.text
            took = time.perf_counter() - start
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await node.store.close()
        if providers is not None:
            for p in providers:
                p.shutdown()
    return took / decisions


async def main(decisions: int, rounds: int) -> int:
    best: dict[str, float] = {}
    for r in range(rounds):
        for variant in ("baseline", "off", "on"):
            with tempfile.TemporaryDirectory() as tmp:
                took = await one_round(Path(tmp), variant, decisions)
            best[variant] = min(best.get(variant, took), took)
            print(f"round {r + 1} {variant}: {took * 1000:.2f} ms per decision")
    off = best["off"] / best["baseline"]
    on = best["on"] / best["off"]
    print(f"ratio telemetry_off/baseline = {off:.3f} (target <= {OFF_TARGET})")
    print(f"ratio telemetry_on/off = {on:.3f} (for reference)")
    print("ok" if off <= OFF_TARGET else "over")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.decisions, args.rounds)))
