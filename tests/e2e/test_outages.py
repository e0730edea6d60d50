"""Real daemons through real outages: PostgreSQL restarted under two nodes (fast and
immediate shutdown) while tasks are submitted and approved, on a throwaway cluster of the
test's own so that the shared server is never disturbed."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.daemons import DaemonProcess, wait_for
from tests.e2e.private_pg import PrivatePostgres, server_bindir
from tests.e2e.traffic import EchoThread, Traffic, settled

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A PostgreSQL cluster of this test's own, removed afterwards whatever happens."""
    bindir = server_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) installed")
    pg = PrivatePostgres(bindir)
    try:
        pg.create()
        yield pg
    finally:
        pg.destroy()


def test_two_nodes_survive_postgresql_restarts_and_every_send_runs_once(
        tmp_path: Path, private_pg: PrivatePostgres) -> None:
    """PostgreSQL restarted (fast, then immediate) under two busy nodes: both stay up and
    recover, every approved SEND reaches the sink exactly once, every task completes, and
    the audit chain verifies."""
    with psycopg.connect(private_pg.conninfo, autocommit=True) as conn:
        conn.execute("CREATE DATABASE outage")
    url = private_pg.url.rsplit("/", 1)[0] + "/outage"
    nodes = [DaemonProcess(tmp_path / f"node{i}", daemon={
        "database": url, "heartbeat": "1s", "lease": "5s"})
             for i in range(2)]
    with EchoThread() as echo:
        try:
            for node in nodes:
                node.start(wait=False)
            for node in nodes:
                node.wait_healthy()
            with Traffic(nodes, echo.url("/hook")) as traffic:
                wait_for(lambda: len(traffic.submitted) >= 10, "the first tasks")
                private_pg.restart("fast")
                wait_for(lambda: len(traffic.submitted) >= 30, "tasks after a fast restart",
                         timeout=90)
                private_pg.restart("immediate")
                wait_for(lambda: len(traffic.submitted) >= 50,
                         "tasks after an immediate restart", timeout=90)
            assert traffic.errors == []
            assert [n.proc.poll() for n in nodes if n.proc] == [None, None]
            ids = traffic.submitted
            wait_for(lambda: settled(nodes, ids), "every task to complete", timeout=120)
            sent = Counter(r.json()["n"] for r in echo.requests if r.path == "/hook")
            assert sorted(sent.values()) == [1] * len(ids), sent
            for node in nodes:
                wait_for(node.healthy, "/health to say ok again")
                assert node.health()["status"] == "ok"
            verify = subprocess.run([sys.executable, "-m", "signoff", "audit", "--verify",
                                     "--config", str(nodes[0].config)], capture_output=True,
                                    text=True, timeout=120, check=False)
            assert verify.returncode == 0, verify.stdout + verify.stderr
        finally:
            for node in nodes:
                node.stop()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of this test's own (root only), unmounted whatever happens."""
    mount = tmp_path / "fs"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the file to delete."""
    filler = directory / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


def test_sqlite_on_a_full_disk_refuses_writes_with_507_and_recovers(
        tmp_path: Path, small_fs: Path) -> None:
    """The disk under SQLite fills up: the daemon stays up, refuses submissions and
    decisions with 507 + Retry-After + reason disk_full, /health says down, reads still
    work; once space is freed it recovers by itself and nothing accepted is lost."""
    node = DaemonProcess(tmp_path / "node", daemon={
        "database": f"sqlite:///{small_fs / 'signoff.db'}", "heartbeat": "1s"})
    steps = [{"tool": "send_webhook", "args": {"url": "http://127.0.0.1:9/x", "payload": {}}}]
    node.start()
    try:
        accepted = [node.submit(steps) for _ in range(3)]
        wait_for(lambda: all(node.task(t)["state"] == "waiting_approval" for t in accepted),
                 "the requests")
        filler = fill(small_fs)
        refused = None
        for _ in range(200):  # SQLite may still have room in its WAL for a few writes
            r = httpx.post(f"{node.url}/tasks", json={"goal": "more", "steps": steps},
                           timeout=30)
            if r.status_code == 202:
                accepted.append(r.json()["id"])
                continue
            refused = r
            break
        assert refused is not None and refused.status_code == 507, refused and refused.text
        assert refused.json()["reason"] == "disk_full"
        assert refused.headers["Retry-After"]
        health = httpx.get(f"{node.url}/health", timeout=10)
        assert health.status_code == 503 and health.json()["status"] == "down"
        assert "full" in health.json()["problems"][0]
        assert httpx.get(f"{node.url}/tasks", timeout=10).status_code == 200  # reads work
        console = httpx.get(f"{node.url}/", headers={"Accept": "text/html"}, timeout=10)
        assert console.status_code == 200 and "The database is unavailable" in console.text
        decided = httpx.post(f"{node.url}/tasks/{accepted[0]}/deny", json={}, timeout=30)
        assert decided.status_code == 507, decided.text
        assert node.proc is not None and node.proc.poll() is None
        filler.unlink()
        wait_for(node.healthy, "/health to recover once space is freed")
        assert node.health()["status"] == "ok"
        accepted.append(node.submit(steps))
        listed = {t["id"] for t in httpx.get(f"{node.url}/tasks", params={"limit": 200},
                                              timeout=10).json()["items"]}
        assert set(accepted) <= listed
        assert node.task(accepted[0])["state"] == "waiting_approval"  # the 507 changed nothing
    finally:
        node.stop()


def test_a_database_outage_past_db_outage_limit_ends_the_daemon_for_its_supervisor(
        tmp_path: Path, private_pg: PrivatePostgres) -> None:
    """With daemon.db_outage_limit set, /health says down during the outage and the daemon
    exits with code 3 once the database has been away that long (systemd restarts it)."""
    node = DaemonProcess(tmp_path / "node", daemon={
        "database": private_pg.url, "heartbeat": "1s", "db_outage_limit": "3s"})
    node.start()
    try:
        private_pg.stop("fast")
        try:
            down = None
            for _ in range(100):
                r = httpx.get(f"{node.url}/health", timeout=10)
                if r.status_code == 503:
                    down = r
                    break
                time.sleep(0.05)
            assert down is not None and down.json()["status"] == "down", down
            assert down.json()["problems"] and down.headers["Retry-After"]
            assert node.proc is not None
            assert node.proc.wait(timeout=60) == 3
            assert "db_outage_limit" in node.log_text()
        finally:
            private_pg.start()
    finally:
        node.stop()


def test_a_node_started_before_its_database_waits_for_it(
        tmp_path: Path, private_pg: PrivatePostgres) -> None:
    """Started while PostgreSQL is down (systemd at boot), the daemon waits instead of
    exiting, and comes up by itself once the database accepts connections."""
    private_pg.stop("fast")
    node = DaemonProcess(tmp_path / "node", daemon={"database": private_pg.url})
    try:
        node.start(wait=False)
        wait_for(lambda: "loop_waiting" in node.log_text(), "the node to wait", timeout=60)
        assert node.proc is not None and node.proc.poll() is None
    finally:
        private_pg.start()
    try:
        node.wait_healthy()
        assert node.health()["status"] == "ok"
    finally:
        node.stop()
