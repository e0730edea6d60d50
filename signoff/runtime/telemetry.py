"""OpenTelemetry: approval waits in the traces and metrics a team already collects.

Off by default (`[telemetry] enabled = true` turns it on; the exporters read the standard
``OTEL_EXPORTER_OTLP_*`` / ``OTEL_SERVICE_NAME`` variables). When it is off nothing here is
imported by the node and no listener is added: no cost at all.

A request can wait for hours and be decided on another node, so no span is held open
across the wait. Each span is recorded when its end is known, with the real start and
end times, as a child of the caller's trace: the W3C ``traceparent`` given to ``POST
/tasks`` or ``POST /v1/approvals`` is kept on the task and the request (`Task.traceparent`,
`Approval.traceparent`), so the node that decides can still link to it.

Spans (all in the caller's trace when it gave one):
- ``signoff.approval.request`` — the moment the request was made (who is asked).
- ``signoff.card`` — one per card delivered, per surface.
- ``signoff.approval`` — from the request to its decision; attributes ``signoff.tool``,
  ``signoff.risk``, ``signoff.decision``, ``signoff.decided_by``, ``signoff.surface``.
- ``signoff.action`` — each action of a task, when the task ends (tool, outcome).

Metrics: ``signoff.approval.time_to_decision`` (a histogram in seconds, by surface,
approver, risk class and decision), ``signoff.approvals.pending`` and
``signoff.cards.undelivered`` (gauges, refreshed from the store as events arrive).

Attributes never carry content, arguments or targets (recipients, paths and URLs may be
personal or secret): only tool names, risk classes, ids and outcomes.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Approval, Task, TaskState
from signoff.runtime.store.port import TaskStore

log = logging.getLogger("signoff.telemetry")

# W3C Trace Context: version-traceid-parentid-flags, lower-case hex; all-zero ids invalid.
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-"
                          r"[0-9a-f]{2}$")


def traceparent(value: str | None) -> str | None:
    """A caller's ``traceparent`` if it is well formed, else None (the W3C rule: an
    invalid one is ignored, never an error)."""
    if not value:
        return None
    value = value.strip().lower()
    return value if len(value) == 55 and _TRACEPARENT.match(value) else None


def surface_of(decided_by: str | None) -> str:
    """Where a decision came from: the actor's prefix (``slack:U1`` → ``slack``)."""
    if not decided_by:
        return "none"
    head, _, _ = decided_by.partition(":")
    return head or "none"


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class Telemetry:
    """The node's OpenTelemetry listener: an `EngineListener` plus card deliveries.

    ``tracer_provider`` and ``meter_provider`` are OpenTelemetry SDK providers (the daemon
    builds OTLP ones with `from_environment`; tests give in-memory ones).
    """

    def __init__(self, *, store: TaskStore, tracer_provider: Any, meter_provider: Any,
                 node_id: str = "") -> None:
        from opentelemetry.metrics import Observation
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.store = store
        self.node_id = node_id
        self._providers = (tracer_provider, meter_provider)
        self._tracer = tracer_provider.get_tracer("signoff")
        self._propagator = TraceContextTextMapPropagator()
        meter = meter_provider.get_meter("signoff")
        self._observation = Observation
        self._pending = 0
        self._undelivered = 0
        self._decision_time = meter.create_histogram(
            "signoff.approval.time_to_decision", unit="s",
            description="Time from an approval request to its decision")
        meter.create_observable_gauge("signoff.approvals.pending", [self._observe_pending],
                                      description="Approval requests waiting for a decision")
        meter.create_observable_gauge("signoff.cards.undelivered",
                                      [self._observe_undelivered],
                                      description="Cards given up on one surface")

    # -- the parent context -------------------------------------------------------------
    def _parent(self, *carriers: str | None) -> Any:
        for value in carriers:
            if value:
                return self._propagator.extract({"traceparent": value})
        return None

    def _span(self, name: str, *, start: datetime, end: datetime, parent: Any,
              attributes: dict[str, Any]) -> None:
        clean = {k: v for k, v in attributes.items() if v is not None}
        span = self._tracer.start_span(name, context=parent, start_time=_ns(start),
                                       attributes=clean)
        span.end(end_time=_ns(max(start, end)))

    @staticmethod
    def _about(approval: Approval) -> dict[str, Any]:
        action = approval.action
        return {"signoff.approval_id": approval.id, "signoff.task_id": approval.task_id,
                "signoff.tool": action.tool,
                "signoff.risk": action.risk.value if action.risk else None,
                "signoff.capability": action.capability}

    # -- EngineListener ----------------------------------------------------------------
    async def approval_requested(self, task: Task | None, approval: Approval) -> None:
        """An instant span for the request; the pending gauge is refreshed."""
        try:
            attributes = {**self._about(approval), "signoff.node": self.node_id,
                          "signoff.approvers": len(approval.approvers)}
            parent = self._parent(approval.traceparent, task.traceparent if task else None)
            self._span("signoff.approval.request", start=approval.requested_at,
                       end=approval.requested_at, parent=parent, attributes=attributes)
            await self._refresh()
        except Exception:  # a listener must not raise; telemetry never stops a request
            log.exception("telemetry_failed")

    async def approval_decided(self, task: Task | None, approval: Approval) -> None:
        """The ``signoff.approval`` span (request → decision) and its time to decide."""
        try:
            end = approval.decided_at or approval.requested_at
            decision = approval.status.value
            surface = surface_of(approval.decided_by)
            attributes = {**self._about(approval), "signoff.decision": decision,
                          "signoff.decided_by": approval.decided_by,
                          "signoff.surface": surface,
                          "signoff.scope": approval.scope.value if approval.scope else None}
            parent = self._parent(approval.traceparent, task.traceparent if task else None)
            self._span("signoff.approval", start=approval.requested_at, end=end,
                       parent=parent, attributes=attributes)
            waited = max((end - approval.requested_at).total_seconds(), 0.0)
            self._decision_time.record(waited, {
                "signoff.surface": surface, "signoff.approver": approval.decided_by or "none",
                "signoff.risk": attributes["signoff.risk"] or "none",
                "signoff.decision": decision})
            await self._refresh()
        except Exception:
            log.exception("telemetry_failed")

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """When a task ends, one ``signoff.action`` span per action it ran or refused."""
        if kind not in (TaskEvent.COMPLETED, TaskEvent.FAILED, TaskEvent.BLOCKED):
            return
        try:
            parent = self._parent(task.traceparent)
            for record in task.actions:
                self._span("signoff.action", start=record.at, end=record.at, parent=parent,
                           attributes={"signoff.task_id": task.id, "signoff.tool": record.tool,
                                       "signoff.risk": record.risk.value if record.risk
                                       else None, "signoff.outcome": record.outcome,
                                       "signoff.decision": record.decision,
                                       "signoff.decided_by": record.decided_by})
        except Exception:
            log.exception("telemetry_failed")

    # -- the bot's deliveries ----------------------------------------------------------
    async def card_delivered(self, approval_id: str | None, surface: str,
                             at: datetime) -> None:
        """A ``signoff.card`` span for one card posted on ``surface``."""
        try:
            approval = await self.store.get_approval(approval_id) if approval_id else None
            task = await self.store.get_task(approval.task_id) \
                if approval is not None and approval.task_id else None
            parent = self._parent(approval.traceparent if approval else None,
                                  task.traceparent if task else None)
            about = self._about(approval) if approval else {"signoff.approval_id": approval_id}
            self._span("signoff.card", start=at, end=at, parent=parent,
                       attributes={**about, "signoff.surface": surface})
            await self._refresh()
        except Exception:
            log.exception("telemetry_failed")

    # -- gauges ------------------------------------------------------------------------
    async def _refresh(self) -> None:
        counts = await self.store.count_by_state([TaskState.WAITING_APPROVAL])
        self._pending = counts.get(TaskState.WAITING_APPROVAL.value, 0)
        self._undelivered = len(await self.store.undelivered(limit=1000))

    def _observe_pending(self, _options: Any) -> Iterable[Any]:
        return [self._observation(self._pending)]

    def _observe_undelivered(self, _options: Any) -> Iterable[Any]:
        return [self._observation(self._undelivered)]

    def shutdown(self) -> None:
        """Flush and stop the exporters (the daemon's stop)."""
        for provider in self._providers:
            try:
                provider.shutdown()
            except Exception:  # an exporter that cannot reach its collector
                log.warning("telemetry_shutdown_failed", exc_info=True)


def from_environment(*, store: TaskStore, node_id: str) -> Telemetry:
    """The daemon's telemetry: OTLP/HTTP exporters configured by the standard
    ``OTEL_EXPORTER_OTLP_*`` variables, service name ``signoff`` unless
    ``OTEL_SERVICE_NAME`` says otherwise."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {"service.instance.id": node_id}
    if not os.environ.get("OTEL_SERVICE_NAME"):  # the standard variable wins when set
        attributes["service.name"] = "signoff"
    resource = Resource.create(attributes)
    tracer = TracerProvider(resource=resource)
    tracer.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    meter = MeterProvider(resource=resource,
                          metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
    return Telemetry(store=store, tracer_provider=tracer, meter_provider=meter,
                     node_id=node_id)
