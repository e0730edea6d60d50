"""OpenTelemetry: an approval's life as spans in the caller's trace, and its metrics.

The spans and metrics go to the SDK's in-memory exporters; the trace id a caller passes
in ``traceparent`` must appear on every span of its request, and nothing of the action's
content (recipients, bodies) in any attribute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from signoff.runtime.store.factory import make_store
from signoff.runtime.telemetry import Telemetry, traceparent
from tests.api.helpers import BOB_KEY, make_settings, running_node, wait_state

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
HEADER = {"traceparent": f"00-{TRACE}-{PARENT}-01"}
ASK = {"tool": "send_email", "policy_id": "s-1", "requester": "hermes:bob",
       "args": {"to": "john@example.com", "subject": "secret plans", "body": "the body"}}


class Exported:
    """In-memory span and metric exporters behind one Telemetry."""

    def __init__(self, tmp_path: Path) -> None:
        self.spans = InMemorySpanExporter()
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter = MeterProvider(metric_readers=[self.metrics])
        self.tracer = tracer

    def telemetry(self, store: Any) -> Telemetry:
        """The node's listener, exporting here."""
        return Telemetry(store=store, tracer_provider=self.tracer, meter_provider=self.meter,
                         node_id="test-node")

    def named(self, name: str) -> list[ReadableSpan]:
        """Finished spans called ``name``."""
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def points(self, metric: str) -> list[Any]:
        """The data points of one metric."""
        data = self.metrics.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found += list(m.data.data_points)
        return found


@pytest.fixture
def exported(tmp_path: Path) -> Iterator[Exported]:
    """Exporters, shut down after the test."""
    found = Exported(tmp_path)
    yield found
    found.tracer.shutdown()
    found.meter.shutdown()


async def settle(check: Any, tries: int = 300) -> None:
    """Wait (on events, not seconds) until ``check()`` holds."""
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.01)
    assert check()


async def test_an_outside_request_is_traced_in_the_callers_trace(tmp_path: Path,
                                                                 exported: Exported) -> None:
    """request → card → decision spans carry the caller's trace id; the decision span
    has tool, risk, decision, decided_by and surface, and no content; time to decide is
    recorded by surface and approver."""
    work = tmp_path / "work"
    settings = make_settings(work)
    store = make_store(settings.database_url(work))
    async with running_node(work, settings=settings, store=store,
                            telemetry=exported.telemetry(store)) as node, \
            node.client(BOB_KEY) as bob, node.client() as admin:
        asked = await bob.post("/v1/approvals", json=ASK, headers=HEADER)
        assert asked.status_code == 202, asked.text
        approval_id = asked.json()["id"]
        await settle(lambda: bool(exported.named("signoff.card")))
        decided = await admin.post(f"/approvals/{approval_id}/approve", json={"scope": "once"})
        assert decided.status_code == 200, decided.text
        await settle(lambda: bool(exported.named("signoff.approval")))

    spans = exported.spans.get_finished_spans()
    assert {s.name for s in spans} >= {"signoff.approval.request", "signoff.card",
                                       "signoff.approval"}
    for span in spans:
        assert f"{span.context.trace_id:032x}" == TRACE, span.name
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT
        text = repr(dict(span.attributes or {}))
        assert "john@example.com" not in text and "secret plans" not in text
    (decision,) = exported.named("signoff.approval")
    attrs = dict(decision.attributes or {})
    assert attrs["signoff.tool"] == "send_email" and attrs["signoff.risk"] == "SEND"
    assert attrs["signoff.decision"] == "approved" and attrs["signoff.decided_by"] == "web:admin"
    assert attrs["signoff.surface"] == "web" and attrs["signoff.approval_id"] == approval_id
    assert decision.end_time is not None and decision.start_time is not None
    assert decision.end_time >= decision.start_time
    (card,) = exported.named("signoff.card")
    assert dict(card.attributes or {})["signoff.surface"] == "web"
    (point,) = exported.points("signoff.approval.time_to_decision")
    assert point.count == 1 and dict(point.attributes)["signoff.approver"] == "web:admin"
    assert dict(point.attributes)["signoff.surface"] == "web"


async def test_a_task_and_its_actions_follow_the_submitters_trace(tmp_path: Path,
                                                                  exported: Exported) -> None:
    """POST /tasks with a traceparent: its approval and its actions are spans of that
    trace; without one, spans start a trace of their own."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "old.txt").write_text("x", encoding="utf-8")
    settings = make_settings(work)
    store = make_store(settings.database_url(work))
    steps = [{"tool": "delete_file", "args": {"path": "old.txt"}}]
    async with running_node(work, settings=settings, store=store,
                            telemetry=exported.telemetry(store)) as node, \
            node.client() as admin:
        created = await admin.post("/tasks", json={"goal": "tidy", "steps": steps},
                                   headers=HEADER)
        task_id = created.json()["id"]
        await wait_state(admin, task_id, "waiting_approval")
        answer = await admin.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
        assert answer.status_code == 200, answer.text
        await wait_state(admin, task_id, "completed")
        await settle(lambda: bool(exported.named("signoff.action")))
    (action,) = exported.named("signoff.action")
    assert f"{action.context.trace_id:032x}" == TRACE
    attrs = dict(action.attributes or {})
    assert (attrs["signoff.tool"], attrs["signoff.outcome"]) == ("delete_file", "ok")
    (decision,) = exported.named("signoff.approval")
    assert f"{decision.context.trace_id:032x}" == TRACE


def test_only_a_well_formed_traceparent_is_kept() -> None:
    """Malformed or all-zero trace context is ignored, as the W3C spec says."""
    good = f"00-{TRACE}-{PARENT}-01"
    assert traceparent(good) == good and traceparent(good.upper()) == good
    for bad in (None, "", "garbage", f"00-{'0' * 32}-{PARENT}-01",
                f"00-{TRACE}-{'0' * 16}-01", good + "-extra", "x" * 10_000):
        assert traceparent(bad) is None


async def test_the_sdk_carries_the_callers_current_span(tmp_path: Path,
                                                        exported: Exported) -> None:
    """An agent instrumented with OpenTelemetry asks through the SDK inside its own span:
    signoff's spans of that request are children of it, with no code in the agent."""
    from opentelemetry import trace

    from signoff.client import Signoff
    from tests.api.helpers import serve

    work = tmp_path / "work"
    settings = make_settings(work)
    store = make_store(settings.database_url(work))
    agent_tracer = TracerProvider().get_tracer("agent")
    async with running_node(work, settings=settings, store=store,
                            telemetry=exported.telemetry(store)) as node, \
            serve(node.app) as base, Signoff(base, api_key=BOB_KEY) as sdk:
        with agent_tracer.start_as_current_span("agent-turn") as turn:
            decision = await sdk.request("send_email", ASK["args"], wait=False)
            assert decision.pending
        await settle(lambda: bool(exported.named("signoff.approval.request")))
    (span,) = exported.named("signoff.approval.request")
    context = turn.get_span_context()
    assert span.context.trace_id == context.trace_id
    assert span.parent is not None and span.parent.span_id == context.span_id
    assert trace.get_current_span() is not turn  # the agent's span ended with its block


HOST_WITH_A_GLOBAL_PROVIDER = """
import asyncio, sys
from pathlib import Path
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.api.helpers import make_settings, running_node

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)

async def main():
    work = Path(sys.argv[1])
    async with running_node(work, settings=make_settings(work)) as node, node.client() as c:
        for path in ("/health", "/tasks", "/approvals"):
            assert (await c.get(path)).status_code == 200, path
    with trace.get_tracer("host").start_as_current_span("the host's own"):
        pass
    print(sorted(s.name for s in spans.get_finished_spans()))

asyncio.run(main())
"""


def test_a_host_processs_global_provider_gets_no_span_of_the_api(tmp_path: Path) -> None:
    """A program that embeds signoff and sets OpenTelemetry's global tracer provider for
    itself gets its own spans there and none of signoff's API: signoff exports only what
    its [telemetry] section configures (FastAPI would trace every request otherwise)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", HOST_WITH_A_GLOBAL_PROVIDER,
                           str(tmp_path / "work")], cwd=root, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[\"the host's own\"]"
