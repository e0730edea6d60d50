"""The daemon killed with SIGKILL mid-action and restarted: nothing is lost, retries are
counted, waiting tasks still wait, and a gated action cut short comes back to a person."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemons import free_port, wait_for

# Unique to this test process: `processes` and `kill_children` look at every process on
# the machine, and other checkouts may run these same tests at the same moment.
READ_SLEEP = f"sleep 41.{os.getpid()}"  # listed as read-only below: a READ action
GATED_SLEEP = f"sleep 42.{os.getpid()}"  # not listed: DESTRUCTIVE, needs approval


def processes(needle: str) -> list[int]:
    """PIDs whose command line is exactly ``needle`` (the tools' child processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue
            if cmd == needle:
                found.append(int(entry.name))
    return found


def kill_children() -> None:
    for needle in (READ_SLEEP, GATED_SLEEP):
        for pid in processes(needle):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Daemon:
    """`signoff daemon start` as a subprocess on a fixed work dir and port."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = tmp / "signoff.toml"
        self.config.write_text(
            "[daemon]\nmax_retries = 1\nlease = \"2s\"\n"
            f"[policy]\nread_only_commands = [\"{READ_SLEEP}\"]\ncommand_timeout = \"120s\"\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.tmp / "daemon.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "signoff", "daemon", "start", "--config",
                 str(self.config), "--port", str(self.port), "--work-dir",
                 str(self.tmp / "work")],
                cwd=self.tmp, stdout=subprocess.DEVNULL, stderr=log)
        wait_for(self._healthy, "the daemon to answer /health")

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def submit(self, steps: list[dict[str, Any]]) -> str:
        r = httpx.post(f"{self.url}/tasks", json={"goal": "crash test", "steps": steps})
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def task(self, task_id: str) -> dict[str, Any]:
        r = httpx.get(f"{self.url}/tasks/{task_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def approve(self, task_id: str, scope: str = "once") -> httpx.Response:
        return httpx.post(f"{self.url}/tasks/{task_id}/approve", json={"scope": scope})


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon that is stopped and whose tool children are killed afterwards."""
    d = Daemon(tmp_path)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "keep.txt").write_text("keep")
    yield d
    d.stop()
    kill_children()


def test_sigkill_mid_action_loses_nothing(daemon: Daemon) -> None:
    """Kill -9 twice while actions run; every task ends up where the contract says."""
    daemon.start()
    running = daemon.submit([{"tool": "run_command", "args": {"command": READ_SLEEP}}])
    waiting = daemon.submit([{"tool": "delete_file", "args": {"path": "keep.txt"}}])
    gated = daemon.submit([{"tool": "run_command", "args": {"command": GATED_SLEEP}}])
    wait_for(lambda: daemon.task(gated)["state"] == "waiting_approval", "the gated request")
    wait_for(lambda: daemon.task(waiting)["state"] == "waiting_approval", "the delete request")
    assert daemon.approve(gated).status_code == 200
    wait_for(lambda: processes(GATED_SLEEP) and processes(READ_SLEEP), "both actions to run")
    old_approval = daemon.task(gated)["approval"]["id"]

    daemon.kill()
    kill_children()
    daemon.start()

    # The READ action is retried once …
    wait_for(lambda: daemon.task(running)["retries"] == 1, "the READ task to be requeued")
    wait_for(lambda: bool(processes(READ_SLEEP)), "the READ action to run again")
    # … the gated one comes back to a person instead of running again …
    wait_for(lambda: daemon.task(gated)["state"] == "waiting_approval", "the gated task")
    again = daemon.task(gated)
    assert again["approval"]["id"] != old_approval
    assert again["pending_action"]["args"] == {"command": GATED_SLEEP}
    assert not processes(GATED_SLEEP)
    audit = httpx.get(f"{daemon.url}/audit", params={"task": gated}).json()["items"]
    assert any(e["reason"] == "outcome unknown after a crash" for e in audit)
    # … and the task that was waiting still waits, and its answer still works.
    assert daemon.task(waiting)["state"] == "waiting_approval"

    daemon.kill()
    kill_children()
    daemon.start()

    wait_for(lambda: daemon.task(running)["state"] == "failed", "max retries to be exceeded")
    assert daemon.task(running)["result"]["reason"] == "max retries exceeded"
    assert daemon.task(running)["retries"] == 2
    assert daemon.approve(waiting).status_code == 200
    wait_for(lambda: daemon.task(waiting)["state"] == "completed", "the delete to complete")
    assert not (daemon.tmp / "work" / "keep.txt").exists()
    assert daemon.task(gated)["state"] == "waiting_approval"


def test_sigterm_shuts_down_cleanly_and_the_next_start_resumes(daemon: Daemon) -> None:
    """SIGTERM exits 0; work cut short is requeued and runs on the next start."""
    daemon.start()
    running = daemon.submit([{"tool": "run_command", "args": {"command": READ_SLEEP}}])
    wait_for(lambda: bool(processes(READ_SLEEP)), "the action to run")
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=30) == 0
    wait_for(lambda: not processes(READ_SLEEP), "the tool's process to be stopped")
    daemon.start()
    wait_for(lambda: daemon.task(running)["retries"] == 1, "the task to be requeued")
    wait_for(lambda: bool(processes(READ_SLEEP)), "the action to run again")
    log = (daemon.tmp / "daemon.log").read_text()
    assert "signoff_stopping" in log


@pytest.mark.postgres
def test_a_second_node_takes_over_the_work_of_a_dead_one(tmp_path: Path, pg_url: str) -> None:
    """Two daemons on one PostgreSQL: kill -9 the one running a task; once its lease runs
    out, the other requeues the task and runs it."""
    for name in ("one", "two"):
        (tmp_path / name / "work").mkdir(parents=True)
    one, two = Daemon(tmp_path / "one"), Daemon(tmp_path / "two")
    for node in (one, two):
        node.config.write_text(node.config.read_text().replace(
            "[daemon]\n", f'[daemon]\ndatabase = "{pg_url}"\n'))
    try:
        one.start()
        running = one.submit([{"tool": "run_command", "args": {"command": READ_SLEEP}}])
        wait_for(lambda: one.task(running)["state"] == "in_progress", "node one to take it")
        one.kill()
        kill_children()
        two.start()
        wait_for(lambda: two.task(running)["retries"] == 1, "node two to requeue it")
        wait_for(lambda: bool(processes(READ_SLEEP)), "node two to run it")
        log = (two.tmp / "daemon.log").read_text()
        assert "sweep_failed" not in log
    finally:
        for node in (one, two):
            node.stop()
        kill_children()
