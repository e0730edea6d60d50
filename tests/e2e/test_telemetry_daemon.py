"""`[telemetry] enabled` on a real daemon: spans and metrics reach an OTLP/HTTP collector
named by the standard OTEL_EXPORTER_OTLP_ENDPOINT, in the trace the caller gave."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.daemons import DaemonProcess, wait_for
from tests.fakes.otlp import OtlpReceiver

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


def test_the_daemon_exports_an_approvals_spans_to_the_collector(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task submitted with a traceparent and approved: the collector receives the
    signoff.approval span in that trace (tool, decision) and the time-to-decision metric,
    flushed at the latest when the daemon stops."""
    with OtlpReceiver() as collector:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
        node = DaemonProcess(tmp_path, extra_toml="[telemetry]\nenabled = true\n")
        (node.work / "old.txt").write_text("x", encoding="utf-8")
        node.start()
        try:
            r = httpx.post(f"{node.url}/tasks", timeout=30,
                           headers={"traceparent": f"00-{TRACE}-{PARENT}-01"},
                           json={"goal": "tidy", "steps": [
                               {"tool": "delete_file", "args": {"path": "old.txt"}}]})
            task_id = r.json()["id"]
            wait_for(lambda: node.task(task_id)["state"] == "waiting_approval", "the request")
            assert node.approve(task_id).status_code == 200
            wait_for(lambda: node.task(task_id)["state"] == "completed", "the task to end")
        finally:
            node.stop()
        wait_for(lambda: any(s.name == "signoff.approval" for s in collector.spans),
                 "the approval span at the collector", timeout=20)
    (span,) = [s for s in collector.spans if s.name == "signoff.approval"]
    assert span.trace_id == TRACE and span.parent_span_id == PARENT
    assert span.attributes["signoff.tool"] == "delete_file"
    assert span.attributes["signoff.decision"] == "approved"
    assert "signoff.approval.time_to_decision" in collector.metrics
    assert "old.txt" not in repr([s.attributes for s in collector.spans])
