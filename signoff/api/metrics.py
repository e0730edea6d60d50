"""Prometheus metrics: counters fed by the engine's events, gauges read at scrape time.

`MetricsListener` is an `EngineListener`: add it to the node's `MultiListener` and it
counts decisions (by outcome, with their latency) and executed actions (by tool and
outcome, when a task ends). Gauges (tasks by state, pending approvals, audit events) are
read from the store when /metrics is scraped, so they are right on every node of a
shared database.

What a scrape costs must not grow with the history: the live states (queued … waiting
for approval) are counted on every scrape, each an index range as large as the work in
flight; the two finished states, which only grow, are counted at most once per
``finished_every`` of the node's Clock (60 s by default), and in between that count plus
the tasks this node finished since (its own engine's events) is served: exact for one
node, other nodes' work shows within ``finished_every``. The audit gauges read the
chain's head row. Each listener has its own `CollectorRegistry`, never the global one,
so several apps (tests, embedded daemons) in one process do not collide.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from prometheus_client import CONTENT_TYPE_LATEST as PROMETHEUS_CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Approval, Task, TaskState
from signoff.runtime.store.port import TaskStore

__all__ = ["PROMETHEUS_CONTENT_TYPE", "MetricsListener"]

LATENCY_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 86400)
FINISHED_EVERY = timedelta(seconds=60)  # how old the completed/failed counts may get
LIVE = tuple(s for s in TaskState if not s.finished)
FINISHED = tuple(s for s in TaskState if s.finished)


class MetricsListener:
    """Counts what the engine reports; renders the Prometheus text format."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 finished_every: timedelta = FINISHED_EVERY) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.finished_every = finished_every
        self._finished: dict[str, int] = {}
        self._finished_at: datetime | None = None
        self._since: dict[str, int] = {}  # tasks this node finished since that count
        r = self.registry
        self.tasks = Gauge("signoff_tasks", "Tasks by state", ["state"], registry=r)
        self.pending = Gauge("signoff_pending_approvals", "Approval requests waiting for a "
                             "decision", registry=r)
        self.audit = Gauge("signoff_audit_events", "Events in the audit chain", registry=r)
        # The chain's head (COUNT:HASH, as `signoff audit --head` prints it): scraped and
        # kept elsewhere, it proves later that the log was not cut short.
        self.head = Info("signoff_audit_head", "Head of the audit hash chain", registry=r)
        self.decisions = Counter("signoff_decisions", "Decisions by outcome "
                                 "(approved, denied, expired)", ["outcome"], registry=r)
        self.latency = Histogram("signoff_decision_latency_seconds", "Time from request to "
                                 "decision", buckets=LATENCY_BUCKETS, registry=r)
        self.actions = Counter("signoff_actions", "Actions of finished tasks by tool and "
                               "outcome", ["tool", "outcome"], registry=r)
        self.tasks_finished = Counter("signoff_tasks_finished", "Tasks that ended, by state",
                                      ["state"], registry=r)

    # -- EngineListener ----------------------------------------------------------------
    async def approval_requested(self, task: Task | None, approval: Approval) -> None:
        """Nothing to count (the pending gauge is read at scrape time)."""

    async def approval_decided(self, task: Task | None, approval: Approval) -> None:
        """Count the decision and observe its latency."""
        self.decisions.labels(outcome=approval.status.value).inc()
        if approval.decided_at is not None:
            seconds = (approval.decided_at - approval.requested_at).total_seconds()
            self.latency.observe(max(seconds, 0.0))

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """When a task ends, count each action of its history once."""
        if kind not in ("completed", "failed"):
            return
        self.tasks_finished.labels(state=kind).inc()
        self._since[kind] = self._since.get(kind, 0) + 1
        for record in task.actions:
            self.actions.labels(tool=record.tool, outcome=record.outcome).inc()

    # -- scraping ----------------------------------------------------------------------
    async def render(self, store: TaskStore, now: datetime) -> bytes:
        """Refresh the gauges from the store and render every metric (``now`` is the
        node's Clock: it decides whether the finished counts are due again)."""
        counts = await store.count_by_state(LIVE)
        if self._finished_at is None or now - self._finished_at >= self.finished_every \
                or now < self._finished_at:
            self._since = {}  # before the count: a task finished during it is not lost
            self._finished = await store.count_by_state(FINISHED)
            self._finished_at = now
        for state in FINISHED:
            counts[state.value] = (self._finished.get(state.value, 0)
                                   + self._since.get(state.value, 0))
        for state in TaskState:
            self.tasks.labels(state=state.value).set(counts.get(state.value, 0))
        self.pending.set(counts.get(TaskState.WAITING_APPROVAL.value, 0))
        events, digest = await store.audit_head()
        self.audit.set(events)
        self.head.info({"count": str(events), "hash": digest})
        return generate_latest(self.registry)
