"""Coalesced requests survive kill -9: after a restart the shared card still decides all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.daemons import DaemonProcess, wait_for

STEP = [{"tool": "run_command", "args": {"command": "true"}}]  # DESTRUCTIVE: asks a person


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    """A daemon on SQLite in its own work dir, stopped afterwards."""
    d = DaemonProcess(tmp_path)
    yield d
    d.stop()


def pending(daemon: DaemonProcess) -> list[dict[str, object]]:
    answer = httpx.get(f"{daemon.url}/approvals", timeout=10)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def test_coalesced_requests_survive_kill_9(daemon: DaemonProcess) -> None:
    """Three identical requests share one card; kill -9 and restart; one approval of the
    card then runs all three tasks, each audited with the decider."""
    daemon.start()
    tasks = [daemon.submit(STEP, goal=f"run true {n}") for n in range(3)]
    for task_id in tasks:
        wait_for(lambda t=task_id: daemon.task(t)["state"] == "waiting_approval",  # type: ignore[misc]
                 f"{task_id} to wait")
    leader = daemon.task(tasks[0])["approval"]["id"]
    assert {str(p["id"]): p["coalesced_into"] for p in pending(daemon)} == {
        leader: None, **{daemon.task(t)["approval"]["id"]: leader for t in tasks[1:]}}

    daemon.kill()
    daemon.start()

    assert [p["coalesced_into"] for p in pending(daemon)].count(leader) == 2
    answer = httpx.post(f"{daemon.url}/approvals/{leader}/approve", json={"scope": "once"},
                        timeout=30)
    assert answer.status_code == 200, answer.text
    for task_id in tasks:
        wait_for(lambda t=task_id: daemon.task(t)["state"] == "completed",  # type: ignore[misc]
                 f"{task_id} to complete")
    audit = httpx.get(f"{daemon.url}/audit", params={"limit": 500}, timeout=10).json()["items"]
    decided = [e for e in audit if e["kind"] == "decision"]
    assert sorted(e["task_id"] for e in decided) == sorted(tasks)
    assert {e["actor"] for e in decided} == {"web:local"}
