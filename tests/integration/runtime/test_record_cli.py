"""`signoff stats` and `signoff suggest` read a seeded SQLite database (fixed dates)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from signoff.runtime.models import AuditEvent
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import Change

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


async def _seed(url: str) -> None:
    """Six approvals of one exact action over six days, one denial of another, an expiry."""
    store = make_store(url)
    await store.open()
    try:
        for day in range(6):
            await store.commit(Change(at=START + timedelta(days=day), audit=[AuditEvent(
                kind="decision", decision="approve", scope="once", actor="slack:U1",
                channel="slack:C1", tool="send_email", risk="SEND",
                targets=["ops@example.com"], fingerprint="f" * 64,
                latency_ms=1000.0 * (day + 1))]))
        await store.commit(Change(at=START, audit=[
            AuditEvent(kind="decision", decision="deny", scope="deny", actor="web:bob",
                       channel="web", tool="run_command", risk="DESTRUCTIVE",
                       fingerprint="d" * 64, latency_ms=500.0),
            AuditEvent(kind="expired", decision="deny", actor="auto:timeout",
                       tool="run_command", risk="DESTRUCTIVE", fingerprint="e" * 64)]))
    finally:
        await store.close()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


async def test_stats_and_suggest_read_the_seeded_history(sqlite_url: str,
                                                         tmp_path: Path) -> None:
    """stats --since DATE --json counts the answers and gives p50/p90 per approver; the
    text form names them; suggest proposes the action approved six times in a row."""
    await _seed(sqlite_url)
    got = _cli("stats", "--since", "2026-03-01", "--json", "--database", sqlite_url,
               cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    body = json.loads(got.stdout)
    assert (body["decisions"], body["approved"], body["denied"], body["expired"]) == (7, 6, 1, 1)
    assert body["time_to_decide"]["approver"]["slack:U1"] == {
        "count": 6, "p50_ms": 3000.0, "p90_ms": 6000.0}
    assert body["actions"][0]["approved"] == 6
    text = _cli("stats", "--since", "2026-03-01", "--database", sqlite_url, cwd=tmp_path)
    assert "time to decide by approver" in text.stdout and "slack:U1" in text.stdout
    later = _cli("stats", "--since", "2026-03-06", "--json", "--database", sqlite_url,
                 cwd=tmp_path)
    assert json.loads(later.stdout)["decisions"] == 2
    found = _cli("suggest", "--json", "--database", sqlite_url, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    suggestions = json.loads(found.stdout)["suggestions"]
    assert [s["fingerprint"] for s in suggestions] == ["f" * 64]
    assert suggestions[0]["approved_in_a_row"] == 6
    plain = _cli("suggest", "--min", "7", "--database", sqlite_url, cwd=tmp_path)
    assert plain.returncode == 0 and "no suggestions" in plain.stdout
    bad = _cli("stats", "--since", "lately", "--database", sqlite_url, cwd=tmp_path)
    assert bad.returncode == 2 and "--since 'lately'" in bad.stderr
