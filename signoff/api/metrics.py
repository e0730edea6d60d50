"""Prometheus metrics: counters fed by the engine's events, gauges read at scrape time.

`MetricsListener` is an `EngineListener`: add it to the node's `MultiListener` and it
counts decisions (by outcome, with their latency) and executed actions (by tool and
outcome, when a task ends). Gauges (tasks by state, pending approvals, audit events) are
read from the store when /metrics is scraped, so they are right on every node of a
shared database.

What a scrape costs must not grow with the work in flight nor with the history: the
tasks per state are the counts the database keeps as tasks change
(`signoff.runtime.store.sql.counts`: a few rows, whatever the number of tasks), read in
full and exact on every scrape; the audit gauges read the chain's head row. (Before, a
GROUP BY counted the live states on every scrape — 2.3x the cost at 100,000 pending
requests, bench/pending.py — and the finished ones once a minute.) Each listener has its
own `CollectorRegistry`, never the global one, so several apps (tests, embedded daemons)
in one process do not collide.
"""

from __future__ import annotations

from datetime import datetime

from prometheus_client import CONTENT_TYPE_LATEST as PROMETHEUS_CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Approval, Task, TaskState
from signoff.runtime.store.port import TaskStore

__all__ = ["PROMETHEUS_CONTENT_TYPE", "MetricsListener"]

LATENCY_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 86400)


class MetricsListener:
    """Counts what the engine reports; renders the Prometheus text format."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
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
        self._children: dict[tuple[object, ...], Counter] = {}  # see `_child`

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
        self._child(self.tasks_finished, kind).inc()
        for record in task.actions:
            self._child(self.actions, record.tool, record.outcome).inc()

    def _child(self, counter: Counter, *labels: str) -> Counter:
        """``counter.labels(*labels)``, remembered: `labels` takes a lock and checks its
        arguments each call, paid several times per finished task otherwise."""
        key = (id(counter), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*labels)
        return child

    # -- scraping ----------------------------------------------------------------------
    async def render(self, store: TaskStore, now: datetime) -> bytes:
        """Refresh the gauges from the store and render every metric (``now``, the node's
        Clock, is kept for callers: no gauge depends on it any more)."""
        counts = await store.count_by_state()
        for state in TaskState:
            self.tasks.labels(state=state.value).set(counts.get(state.value, 0))
        self.pending.set(counts.get(TaskState.WAITING_APPROVAL.value, 0))
        events, digest = await store.audit_head()
        self.audit.set(events)
        self.head.info({"count": str(events), "hash": digest})
        return generate_latest(self.registry)
