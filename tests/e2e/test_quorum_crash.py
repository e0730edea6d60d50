"""Quorum and hold across kill -9: a partial approval and a held approval are durable; the
held action runs once, after its window, or never when it was undone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemons import DaemonProcess, wait_for

ADMIN, BOB = "admin-key-0123456789abcdef", "bob-key-0123456789abcdef"
CAROL = "carol-key-0123456789abcdef"
DELETE = [{"tool": "delete_file", "args": {"path": "keep.txt"}}]


class Daemon(DaemonProcess):
    """A daemon with three API keys (admin, bob, carol), a quorum on fs.delete and/or a hold."""

    def __init__(self, tmp: Path, *, quorum: int = 1, hold: str = "0s") -> None:
        super().__init__(tmp, extra_toml=(
            f'[api]\nkey = "{ADMIN}"\nkeys = [{{ name = "bob", key = "{BOB}" }}, '
            f'{{ name = "carol", key = "{CAROL}" }}]\n'
            f'[approvals]\nhold = {{ DESTRUCTIVE = "{hold}" }}\n'
            f'[policy.quorum]\n"fs.delete" = {quorum}\n'))
        (self.work / "keep.txt").write_text("keep")

    def call(self, method: str, path: str, key: str = ADMIN, **kw: Any) -> httpx.Response:
        return httpx.request(method, f"{self.url}{path}", timeout=30,
                             headers={"Authorization": f"Bearer {key}"}, **kw)

    def state(self, task_id: str) -> dict[str, Any]:
        r = self.call("GET", f"/tasks/{task_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def submit_delete(self) -> str:
        r = self.call("POST", "/tasks", json={"goal": "clean up", "steps": DELETE})
        assert r.status_code == 202, r.text
        task_id = str(r.json()["id"])
        wait_for(lambda: self.state(task_id)["state"] == "waiting_approval", "the request")
        return task_id

    def kinds(self, task_id: str) -> list[str]:
        r = self.call("GET", "/audit", params={"task": task_id, "limit": 500})
        return [e["kind"] for e in r.json()["items"]]


@pytest.fixture
def made(tmp_path: Path) -> Iterator[list[Daemon]]:
    """Daemons made by the test, stopped afterwards."""
    daemons: list[Daemon] = []
    yield daemons
    for d in daemons:
        d.stop()


def test_a_held_approval_survives_kill_9_and_runs_once_after_its_window(
        tmp_path: Path, made: list[Daemon]) -> None:
    """Approved with a 4s hold, killed at once: after the restart the file is deleted
    once the window is over, and the audit log has one release."""
    daemon = Daemon(tmp_path, hold="4s")
    made.append(daemon)
    daemon.start()
    task_id = daemon.submit_delete()
    r = daemon.call("POST", f"/tasks/{task_id}/approve", json={"scope": "once"})
    assert r.status_code == 200 and r.json()["approval"]["status"] == "held", r.text
    daemon.kill()
    assert (daemon.work / "keep.txt").exists()
    daemon.start()
    wait_for(lambda: daemon.state(task_id)["state"] == "completed", "the held delete to run")
    assert not (daemon.work / "keep.txt").exists()
    kinds = daemon.kinds(task_id)
    assert kinds.count("released") == 1 and kinds.count("decision") == 1


def test_undo_after_a_restart_still_denies(tmp_path: Path, made: list[Daemon]) -> None:
    """Held for 60s, killed, restarted: Undo denies it and the action never runs; a second
    Undo is 409."""
    daemon = Daemon(tmp_path, hold="60s")
    made.append(daemon)
    daemon.start()
    task_id = daemon.submit_delete()
    approval_id = daemon.state(task_id)["approval"]["id"]
    daemon.call("POST", f"/tasks/{task_id}/approve", json={"scope": "once"})
    daemon.kill()
    daemon.start()
    assert daemon.state(task_id)["approval"]["status"] == "held"
    r = daemon.call("POST", f"/approvals/{approval_id}/undo", key=BOB)
    assert r.status_code == 200 and r.json()["reason"] == "undone by web:bob", r.text
    wait_for(lambda: daemon.state(task_id)["state"] == "failed", "the task to be denied")
    assert (daemon.work / "keep.txt").exists()
    assert daemon.call("POST", f"/approvals/{approval_id}/undo").status_code == 409
    assert "undo" in daemon.kinds(task_id)


def test_a_partial_quorum_survives_kill_9(tmp_path: Path, made: list[Daemon]) -> None:
    """Asked by admin (who never counts): Bob's approval is 1 of 2, kill -9, restart: the
    count is still 1 of 2 and Carol's approval completes it."""
    daemon = Daemon(tmp_path, quorum=2)
    made.append(daemon)
    daemon.start()
    task_id = daemon.submit_delete()
    own = daemon.call("POST", f"/tasks/{task_id}/approve", json={"scope": "once"})
    assert own.status_code == 403, own.text
    first = daemon.call("POST", f"/tasks/{task_id}/approve", key=BOB, json={"scope": "once"})
    assert first.status_code == 200, first.text
    approval_id = first.json()["approval"]["id"]
    assert daemon.call("GET", f"/v1/approvals/{approval_id}").json()["approvals"] == 1
    daemon.kill()
    daemon.start()
    assert daemon.state(task_id)["state"] == "waiting_approval"
    again = daemon.call("GET", f"/v1/approvals/{approval_id}").json()
    assert (again["status"], again["approvals"], again["needed"]) == ("pending", 1, 2)
    second = daemon.call("POST", f"/tasks/{task_id}/approve", key=CAROL,
                         json={"scope": "once"})
    assert second.status_code == 200, second.text
    wait_for(lambda: daemon.state(task_id)["state"] == "completed", "the delete to run")
    assert not (daemon.work / "keep.txt").exists()
