"""A local OTLP/HTTP receiver: what an OpenTelemetry collector sees from the daemon.

It accepts the exporters' protobuf POSTs on ``/v1/traces`` and ``/v1/metrics`` (the
OTLP/HTTP wire format), decodes them with the protocol's own message types and keeps the
spans' names, ids and attributes, and the metrics' names, for tests to read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.fakes.server import FakeServer


@dataclass
class ReceivedSpan:
    """One span as the collector decoded it."""

    name: str
    trace_id: str
    parent_span_id: str
    attributes: dict[str, Any]


@dataclass
class OtlpReceiver(FakeServer):
    """``with OtlpReceiver() as r:`` serves on ``r.url`` until the block ends."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        """What to put in OTEL_EXPORTER_OTLP_ENDPOINT."""
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        """The OTLP/HTTP export endpoints, answered with the protocol's own responses."""
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        app.router.add_post("/v1/metrics", self._export)
        return app

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.path == "/v1/traces":
            self._traces(body)
            answer = ExportTraceServiceResponse().SerializeToString()
        else:
            self._metrics(body)
            answer = ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attrs = {a.key: _value(a.value) for a in span.attributes}
                    self.spans.append(ReceivedSpan(span.name, span.trace_id.hex(),
                                                   span.parent_span_id.hex(), attrs))

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                self.metrics.update(m.name for m in scope.metrics)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None
