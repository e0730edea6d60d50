"""Several `signoff daemon start` processes on one fresh PostgreSQL database: work shared
exactly once, schedules fired once per fire time, decisions accepted by any node, the node
registry, and LISTEN/NOTIFY wake-ups (with their reconnect)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa

from signoff.config.settings import Settings
from signoff.runtime.models import Action
from signoff.runtime.store.postgres.notify import APPLICATION_NAME, libpq_url
from signoff.wiring import build_node
from tests.e2e.daemons import DaemonProcess, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

Cluster = Callable[..., list[DaemonProcess]]
LIST_DIR = [{"tool": "list_dir", "args": {"path": "."}}]
QUIET = {"poll_interval": "120s"}  # only a wake-up can explain a pickup within the test


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    """Start N daemons on the test's database (each with its own work dir); stop them all."""
    started: list[DaemonProcess] = []

    def start(count: int, *, daemon: dict[str, Any] | None = None,
              extra_toml: str = "") -> list[DaemonProcess]:
        nodes = [DaemonProcess(tmp_path / f"node{len(started) + i}",
                               daemon={"database": pg_url, **(daemon or {})},
                               extra_toml=extra_toml) for i in range(count)]
        started.extend(nodes)
        for node in nodes:  # in parallel: each start imports the whole package
            node.start(wait=False)
        for node in nodes:
            node.wait_healthy()
        return nodes

    yield start
    for node in started:
        node.stop()


def states(pg_url: str) -> dict[str, int]:
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT state, count(*) FROM tasks GROUP BY state"))
            return {str(r[0]): int(r[1]) for r in rows}
    finally:
        engine.dispose()


def stored_tasks(pg_url: str, where: str = "TRUE") -> list[dict[str, Any]]:
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT data, state FROM tasks WHERE {where}"))
            return [{**json.loads(r[0]), "state": r[1]} for r in rows]
    finally:
        engine.dispose()


def submit_elsewhere(tmp_path: Path, pg_url: str) -> str:
    """Queue a task straight into the database, as another node's API would (no worker
    here, no HTTP call to the daemon under test): only a NOTIFY can tell the daemon."""
    settings = Settings.model_validate({"daemon": {"work_dir": str(tmp_path / "submitter"),
                                                   "node_id": "submitter"}})

    async def main() -> str:
        node = build_node(settings, database=pg_url, surfaces={})
        await node.store.open()
        try:
            task = await node.engine.submit("from elsewhere",
                                            steps=[Action(tool="list_dir", args={"path": "."})])
            assert task is not None
            return task.id
        finally:
            await node.store.close()

    return asyncio.run(main())


def test_a_thousand_tasks_on_three_nodes_each_run_exactly_once(cluster: Cluster,
                                                               pg_url: str) -> None:
    """1,000 tasks submitted to three nodes in turn all complete, and each ran once: every
    task left exactly one file, in the work dir of exactly one node."""
    nodes = cluster(3)
    count = 1000
    clients = [httpx.Client(timeout=60) for _ in nodes]
    try:
        def submit(i: int) -> str:
            steps = [{"tool": "write_file", "args": {"path": f"runs/{i}.txt",
                                                     "content": str(i)}}]
            return nodes[i % 3].submit(steps, goal=f"run {i}", client=clients[i % 3])

        with ThreadPoolExecutor(max_workers=12) as pool:
            ids = list(pool.map(submit, range(count)))
    finally:
        for client in clients:
            client.close()
    assert len(set(ids)) == count
    wait_for(lambda: states(pg_url).get("completed", 0) == count or
             set(states(pg_url)) - {"queued", "in_progress", "completed"},
             "the cluster to finish the tasks", timeout=300)
    assert states(pg_url) == {"completed": count}
    written = Counter(path.name for node in nodes for path in (node.work / "runs").glob("*.txt"))
    assert sorted(written) == sorted(f"{i}.txt" for i in range(count))
    assert set(written.values()) == {1}  # nobody ran a task another node also ran
    for task in stored_tasks(pg_url):
        assert [(a["tool"], a["outcome"]) for a in task["actions"]] == [("write_file", "ok")]
    for node in nodes:
        log = node.log_text()
        assert "task_crashed" not in log and "task_changed_elsewhere" not in log


SCHEDULE = """
[[schedules]]
name = "tick"
every = "1s"
goal = "tick"
steps = [{ tool = "list_dir", args = { path = "." } }]
"""


def test_an_every_second_schedule_on_three_nodes_fires_once_per_second(
        cluster: Cluster, pg_url: str) -> None:
    """Three nodes fire `every = "1s"` for ~10 s: one task per fire time, none twice, and
    every second between the first and the last has its task (or a logged skip, or a line
    naming it as coalesced by a late scheduler: it is never lost silently)."""
    nodes = cluster(3, extra_toml=SCHEDULE)
    time.sleep(10)
    for node in nodes:
        node.stop()
    tasks = stored_tasks(pg_url, "schedule = 'tick'")
    fires = sorted(datetime.fromisoformat(t["fire_time"]) for t in tasks)
    assert len(fires) >= 5, fires  # ~10 s of firing, whatever the machine's load
    assert len(fires) == len(set(fires))
    assert all(f.microsecond == 0 for f in fires)
    assert not [t for t in tasks if t["state"] == "failed"]
    skipped = {datetime.fromisoformat(m) for node in nodes
               for m in re.findall(r"schedule_(?:skipped|coalesced) schedule=tick fire_time=(\S+)",
                                   node.log_text())}
    second = timedelta(seconds=1)
    expected = {fires[0] + n * second for n in range(int((fires[-1] - fires[0]) / second) + 1)}
    assert expected - set(fires) - skipped == set()


def test_a_decision_given_to_another_node_resumes_the_task_once(cluster: Cluster,
                                                                pg_url: str) -> None:
    """A task paused by one node is approved through another: it resumes once, there."""
    nodes = cluster(3)
    task_id = nodes[0].submit([{"tool": "run_command", "args": {"command": "touch resumed"}}])
    wait_for(lambda: nodes[0].task(task_id)["state"] == "waiting_approval", "the request")
    [paused_by] = [n for n in nodes if f"approval_requested task_id={task_id}" in n.log_text()]
    other = next(n for n in nodes if n is not paused_by)
    r = other.approve(task_id)
    assert r.status_code == 200, r.text
    again = next(n for n in nodes if n is not paused_by and n is not other).approve(task_id)
    assert again.status_code == 409
    wait_for(lambda: paused_by.task(task_id)["state"] == "completed", "the task to resume")
    assert [n for n in nodes if (n.work / "resumed").exists()] == [other]
    task = other.task(task_id)
    assert [(a["tool"], a["outcome"]) for a in task["actions"]] == [("run_command", "ok")]
    audit = httpx.get(f"{other.url}/audit", params={"task": task_id}).json()["items"]
    assert [e["decision"] for e in audit if e["kind"] == "decision"] == ["approve"]


def listed(node: DaemonProcess) -> set[str]:
    return {n["id"] for n in node.health()["nodes"]}


def signoff_nodes(node: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff", "nodes", "--config",
                           str(node.config), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_nodes_and_health_list_the_live_nodes_and_drop_a_killed_one(cluster: Cluster) -> None:
    """`signoff nodes` and /health list the three nodes (host name + the suffix kept in
    the state dir); kill -9 one and it drops out once its heartbeat window has passed."""
    nodes = cluster(3, daemon={"heartbeat": "1s"})
    ids = {n.health()["node"] for n in nodes}
    for node in nodes:
        suffix = (node.work.parent / "signoff-state" / "node-id").read_text().strip()
        assert node.health()["node"] == f"{socket.gethostname()}-{suffix}"
    wait_for(lambda: listed(nodes[0]) == ids, "all three nodes to beat")
    [entry, *_] = nodes[1].health()["nodes"]
    assert set(entry) == {"id", "host", "started_at", "last_beat", "running"}
    assert entry["host"] == socket.gethostname() and entry["running"] == 0
    out = signoff_nodes(nodes[2], "--json")
    assert out.returncode == 0, out.stderr
    assert {n["id"] for n in json.loads(out.stdout)} == ids
    table = signoff_nodes(nodes[2])
    assert table.returncode == 0 and all(i in table.stdout for i in ids)

    dead = nodes[2].health()["node"]
    nodes[2].kill()
    wait_for(lambda: listed(nodes[0]) == ids - {dead}, "the killed node to drop out")
    assert listed(nodes[1]) == ids - {dead}
    out = signoff_nodes(nodes[0], "--json")
    assert {n["id"] for n in json.loads(out.stdout)} == ids - {dead}


def test_an_idle_node_is_woken_by_a_submission_made_elsewhere(
        cluster: Cluster, pg_url: str, tmp_path: Path) -> None:
    """With a two-minute poll interval, a task queued by another process still runs:
    the insert's NOTIFY woke the idle node."""
    [node] = cluster(1, daemon=QUIET)
    wait_for(lambda: "notify_listening" in node.log_text(), "the node to LISTEN")
    time.sleep(1)  # let the start-up claims find the queue empty and go idle
    task_id = submit_elsewhere(tmp_path, pg_url)
    wait_for(lambda: node.task(task_id)["state"] == "completed", "the woken node to run it",
             timeout=60)


def test_a_dropped_listen_connection_reconnects_and_still_wakes(
        cluster: Cluster, pg_url: str, tmp_path: Path) -> None:
    """pg_terminate_backend on the LISTEN connection: the loss and the reconnect are
    logged, and a later submission still wakes the (long-polling) node."""
    [node] = cluster(1, daemon=QUIET)
    wait_for(lambda: "notify_listening" in node.log_text(), "the node to LISTEN")
    with psycopg.connect(libpq_url(pg_url), autocommit=True) as admin:
        rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = current_database() AND application_name = %s",
                             (APPLICATION_NAME,)).fetchall()
    assert rows == [(True,)]
    wait_for(lambda: "notify_listen_lost" in node.log_text(), "the loss to be logged")
    wait_for(lambda: node.log_text().count("notify_listening") == 2, "the reconnect")
    time.sleep(1)  # the reconnect's own wake-up has been spent on an empty queue
    task_id = submit_elsewhere(tmp_path, pg_url)
    wait_for(lambda: node.task(task_id)["state"] == "completed", "the woken node to run it",
             timeout=60)
