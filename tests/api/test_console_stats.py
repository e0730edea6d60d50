"""The console's stats page: time to decide and suggestions, on the node's clock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from signoff.runtime.clock import FakeClock
from signoff.runtime.models import AuditEvent
from signoff.runtime.store.port import Change
from tests.api.helpers import running_node


def _approval(fp: str, ms: float, actor: str = "slack:U1") -> AuditEvent:
    return AuditEvent(kind="decision", decision="approve", scope="once", actor=actor,
                      channel="slack:C1", tool="send_email", risk="SEND",
                      targets=["<b>ops</b>@example.com"], fingerprint=fp, latency_ms=ms)


async def test_the_stats_page_shows_the_window_and_the_suggestions(tmp_path: Path) -> None:
    """/console/stats counts the decisions of the last 30 days by the node's clock (an
    older one is left out), shows p50/p90 per approver, suggests the action approved five
    times in a row, escapes what the log holds, and refuses a nonsense window (422)."""
    clock = FakeClock()
    now = clock.now()
    async with running_node(tmp_path / "work", clock=clock) as node, node.client() as client:
        store = node.node.store
        await store.commit(Change(at=now - timedelta(days=40), audit=[_approval("old", 9e6)]))
        for i in range(5):
            await store.commit(Change(at=now - timedelta(days=5 - i),
                                      audit=[_approval("f" * 64, 1000.0 * (i + 1))]))
        page = await client.get("/console/stats", params={"since": "30d"})
        assert page.status_code == 200, page.text
        text = page.text
        assert "5 decisions (5 approved, 0 denied), 0 expired" in text
        assert 'data-by="approver"' in text and "<td>slack:U1</td><td>3.0 s</td>" in text
        assert "approved 5 times in a row" in text and "--for 7d" in text
        assert "<b>ops</b>" not in text and "&lt;b&gt;ops&lt;/b&gt;" in text
        everything = await client.get("/console/stats", params={"since": "2000-01-01"})
        assert "6 decisions" in everything.text
        bad = await client.get("/console/stats", params={"since": "lately"})
        assert bad.status_code == 422 and "--since" in bad.text
