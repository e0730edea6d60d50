"""An MCP client's trace context through `signoff mcp-gate`: a call made with
``_meta.traceparent`` is filed under it, so the daemon's spans of the request join the
client's trace (OpenTelemetry, the SDK's in-memory exporter on the daemon's side)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from signoff.runtime.store.factory import make_store
from signoff.runtime.telemetry import Telemetry
from tests.api.helpers import eventually, make_settings, running_node, serve
from tests.api.test_mcp_gate import config, gate, repo  # noqa: F401 - config, repo: fixtures

pytestmark = pytest.mark.slow

TRACE = "5bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "10f067aa0ba902b7"


async def test_a_gated_call_joins_the_clients_trace(tmp_path: Path, config: Path,  # noqa: F811
                                                    repo: Path) -> None:  # noqa: F811
    """git_add called with _meta.traceparent: the daemon's request span is a child of the
    client's span; denied, the call is refused."""
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    work = tmp_path / "daemon"
    settings = make_settings(work)
    store = make_store(settings.database_url(work))
    telemetry = Telemetry(store=store, tracer_provider=tracer, meter_provider=meter)
    try:
        async with running_node(work, settings=settings, store=store,
                                telemetry=telemetry) as node, serve(node.app) as url, \
                gate(config, url) as through:
            call = asyncio.create_task(through.call_tool(
                "git_add", {"repo_path": str(repo), "files": ["new.txt"]},
                meta={"traceparent": f"00-{TRACE}-{PARENT}-01"}))  # type: ignore[typeddict-unknown-key]

            async def asked() -> bool:
                return any(s.name == "signoff.approval.request"
                           for s in spans.get_finished_spans())

            await eventually(asked, 60, "the request's span")
            async with node.client() as admin:
                pending = (await admin.get("/approvals", params={"status": "pending"})).json()
                denied = await admin.post(f"/approvals/{pending['items'][0]['id']}/deny",
                                          json={"reason": "not today"})
                assert denied.status_code == 200, denied.text
            result = await asyncio.wait_for(call, 60)
            assert result.is_error
    finally:
        tracer.shutdown()
        meter.shutdown()
    (request,) = [s for s in spans.get_finished_spans() if s.name == "signoff.approval.request"]
    assert f"{request.context.trace_id:032x}" == TRACE
    assert request.parent is not None and f"{request.parent.span_id:016x}" == PARENT
    assert dict(request.attributes or {})["signoff.tool"] == "git.git_add"
