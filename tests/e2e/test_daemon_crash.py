"""The daemon killed with SIGKILL mid-action and restarted: nothing is lost, retries are
counted, waiting tasks still wait, and a gated action cut short comes back to a person."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.daemons import DaemonProcess, wait_for

# Unique to this test process: `processes` and `kill_children` look at every process on
# the machine, and other checkouts may run these same tests at the same moment.
READ_SLEEP = f"sleep 41.{os.getpid()}"  # listed as read-only below: a READ action
SHORT_SLEEP = f"sleep 1.{os.getpid()}"  # read-only too: done well within a grace of 30 s
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


class Daemon(DaemonProcess):
    """`signoff daemon start` as a subprocess: retried once, a short lease, READ_SLEEP safe,
    and a SIGTERM cuts a task short after 1 s (``grace``), not the default 10 s."""

    def __init__(self, tmp: Path, *, grace: str = "1s") -> None:
        super().__init__(tmp, daemon={"max_retries": 1, "lease": "2s", "shutdown_grace": grace},
                         extra_toml=(f'[policy]\nread_only_commands = ["{READ_SLEEP}", '
                                     f'"{SHORT_SLEEP}"]\ncommand_timeout = "120s"\n'))
        self.tmp = tmp


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon that is stopped and whose tool children are killed afterwards."""
    d = Daemon(tmp_path)
    (tmp_path / "work").mkdir(exist_ok=True)
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
    # … and says it finished stopping, so a log read later tells a clean stop from a kill.
    assert log.index("signoff_stopping") < log.index("signoff_stopped")


def test_sigterm_lets_a_task_in_flight_finish_within_the_grace(tmp_path: Path) -> None:
    """With ``shutdown_grace = "30s"`` a SIGTERM waits for the action running (about 1 s):
    the task completes, is not requeued, and the daemon exits 0 well before 30 s."""
    daemon = Daemon(tmp_path, grace="30s")
    try:
        daemon.start()
        task = daemon.submit([{"tool": "run_command", "args": {"command": SHORT_SLEEP}}])
        wait_for(lambda: bool(processes(SHORT_SLEEP)), "the action to run")
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=25) == 0
        daemon.start()
        done = daemon.task(task)
        assert (done["state"], done["retries"]) == ("completed", 0)
    finally:
        daemon.stop()


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
