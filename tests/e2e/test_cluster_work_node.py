"""Two `signoff daemon start` processes on one PostgreSQL database, each with its own work
dir: a task whose steps wrote a file on one node is approved on the other and goes on
where its file is; if that node is gone, the task fails saying so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.daemons import DaemonProcess, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WRITE_THEN_DELETE = [{"tool": "write_file", "args": {"path": "note.txt", "content": "x"}},
                     {"tool": "delete_file", "args": {"path": "note.txt"}}]


@pytest.fixture(params=[False])
def two_nodes(request: pytest.FixtureRequest, tmp_path: Path,
              pg_url: str) -> Iterator[list[DaemonProcess]]:
    """Two daemons on the test's database, quick heartbeats and a short lease
    (``daemon.shared_work_dir`` as parametrized)."""
    daemon: dict[str, Any] = {"database": pg_url, "heartbeat": "500ms", "lease": "2s",
                              "shared_work_dir": request.param}
    nodes = [DaemonProcess(tmp_path / f"node{i}", daemon=daemon) for i in range(2)]
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        node.wait_healthy()
    yield nodes
    for node in nodes:
        node.stop()


def paused(nodes: list[DaemonProcess]) -> tuple[str, DaemonProcess, DaemonProcess]:
    """Submit the two steps; (task id, node whose work dir has the file, the other)."""
    task_id = nodes[0].submit(WRITE_THEN_DELETE)
    wait_for(lambda: nodes[0].task(task_id)["state"] == "waiting_approval", "the request")
    [home] = [n for n in nodes if (n.work / "note.txt").exists()]
    return task_id, home, next(n for n in nodes if n is not home)


def test_an_approval_on_another_node_runs_where_the_files_are(
        two_nodes: list[DaemonProcess]) -> None:
    """The delete approved through node B runs on node A, where the file was written."""
    task_id, home, other = paused(two_nodes)
    r = other.approve(task_id)
    assert r.status_code == 200, r.text
    wait_for(lambda: other.task(task_id)["state"] in ("completed", "failed"), "the task")
    task = other.task(task_id)
    assert task["state"] == "completed", task["result"]
    assert [(a["tool"], a["outcome"]) for a in task["actions"]] == [
        ("write_file", "ok"), ("delete_file", "ok")]
    assert not (home.work / "note.txt").exists()


def test_a_task_whose_node_is_gone_fails_saying_so(two_nodes: list[DaemonProcess]) -> None:
    """Node A is killed while its task waits; approved on B, the task fails naming A."""
    task_id, home, other = paused(two_nodes)
    gone = home.health()["node"]
    home.kill()
    r = other.approve(task_id)
    assert r.status_code == 200, r.text
    wait_for(lambda: other.task(task_id)["state"] == "failed", "the task to fail")
    reason = other.task(task_id)["result"]["reason"]
    assert reason == (f"node {gone}, whose work dir this task used, is gone "
                      "(no heartbeat for longer than its lease)")
    assert (home.work / "note.txt").exists()  # nothing ran in B's work dir instead


@pytest.mark.parametrize("two_nodes", [True], indirect=True)
def test_with_a_shared_work_dir_the_deciding_node_goes_on(
        two_nodes: list[DaemonProcess]) -> None:
    """`shared_work_dir = true` says every node sees the same files: the node that took
    the decision runs the delete (here the dirs are not really shared, so it fails)."""
    task_id, home, other = paused(two_nodes)
    assert other.approve(task_id).status_code == 200
    wait_for(lambda: other.task(task_id)["state"] == "failed", "the task to end")
    assert [(a["tool"], a["outcome"]) for a in other.task(task_id)["actions"]] == [
        ("write_file", "ok"), ("delete_file", "error")]
    assert (home.work / "note.txt").exists()
