"""Real daemons through real outages: PostgreSQL restarted under two nodes (fast and
immediate shutdown) while tasks are submitted and approved, on a throwaway cluster of the
test's own so that the shared server is never disturbed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from signoff.runtime.clock import SystemClock
from signoff.runtime.outages import Outages
from signoff.runtime.store.postgres.leader import PgLeadership
from signoff.runtime.store.postgres.notify import TaskWakeups
from tests.e2e.daemons import DaemonProcess, wait_for
from tests.e2e.private_pg import PrivatePostgres, server_bindir
from tests.e2e.test_cluster import submit_elsewhere
from tests.e2e.test_cluster_telegram import ThreadedTelegram
from tests.e2e.traffic import EchoThread, Traffic, fill, settled

pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(400)]


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


async def test_listen_and_leadership_losses_are_problems_until_both_are_back(
        private_pg: PrivatePostgres) -> None:
    """PostgreSQL restarted under a node's LISTEN connection and a lease it leads: both
    are named as problems while they are down, and cleared once LISTEN is in place again
    (with one wake-up, to catch what NOTIFY missed) and the node leads again."""
    outages = Outages(SystemClock())
    wakes: list[float] = []
    wakeups = TaskWakeups(url=private_pg.url, wake=lambda: wakes.append(time.monotonic()),
                          outages=outages, first_backoff=0.1, max_backoff=0.5)
    ship = PgLeadership(url=private_pg.url, node_id="n1", retry=0.1, ping=0.2,
                        max_backoff=0.5)
    ship.outages = outages
    leads: list[float] = []

    async def lead() -> None:
        while True:
            async with ship.hold("polling") as lease:
                leads.append(time.monotonic())
                await lease.wait_lost()

    async def until(check: Callable[[], bool], what: str) -> None:
        end = time.monotonic() + 30
        while not check():
            assert time.monotonic() < end, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    def named() -> set[str]:
        return {p.split(":", 1)[0] for p in outages.problems()}

    running = [asyncio.create_task(wakeups.run()), asyncio.create_task(lead())]
    try:
        await until(lambda: wakeups.connected.is_set() and len(leads) == 1, "LISTEN and lead")
        assert outages.problems() == [] and len(wakes) == 1
        await asyncio.to_thread(private_pg.stop, "fast")
        try:
            await until(lambda: named() >= {"listen", "leadership polling"}, "both reported")
            assert outages.status() == "degraded"
            assert any("LISTEN connection down" in p for p in outages.problems())
        finally:
            await asyncio.to_thread(private_pg.start)
        await until(lambda: not named() and len(leads) == 2, "both to be back")
        assert wakeups.connected.is_set() and len(wakes) == 2  # the catch-up look
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def health_now(node: DaemonProcess) -> tuple[int, dict[str, Any]]:
    """/health's status code and body, whichever it is (503 while the database is away)."""
    r = httpx.get(f"{node.url}/health", timeout=10)
    return r.status_code, dict(r.json())


def test_health_names_the_lost_listen_and_polling_lease_until_the_node_is_back(
        tmp_path: Path, private_pg: PrivatePostgres) -> None:
    """A daemon polling Telegram on PostgreSQL through a restart: /health names the LISTEN
    connection and the polling lease among its problems while they are lost; afterwards
    it polls again, says ok, and a task queued by another process wakes it (LISTEN is
    back; its poll interval is two minutes)."""
    with ThreadedTelegram() as telegram:
        node = DaemonProcess(tmp_path / "node", extra_toml=telegram.toml(), daemon={
            "database": private_pg.url, "heartbeat": "1s", "poll_interval": "120s"})
        node.start()
        try:
            wait_for(lambda: "notify_listening" in node.log_text()
                     and "telegram_polling_started" in node.log_text(), "LISTEN and polling")
            private_pg.stop("fast")
            try:
                def lost() -> bool:
                    named = {p.split(":", 1)[0] for p in health_now(node)[1]["problems"]}
                    return named >= {"listen", "leadership telegram-polling"}

                wait_for(lost, "/health to name LISTEN and the polling lease", timeout=30)
                assert health_now(node)[0] == 503
            finally:
                private_pg.start()
            wait_for(lambda: health_now(node)[0] == 200
                     and health_now(node)[1]["problems"] == [], "/health to say ok again",
                     timeout=60)
            assert node.log_text().count("notify_listening") == 2
            assert node.log_text().count("telegram_polling_started") == 2
            task_id = submit_elsewhere(tmp_path, private_pg.url)
            wait_for(lambda: node.task(task_id)["state"] == "completed",
                     "the woken node to run a task queued elsewhere", timeout=30)
        finally:
            node.stop()


def test_a_read_only_database_is_an_outage_until_writes_work_again(
        tmp_path: Path, private_pg: PrivatePostgres) -> None:
    """The database answers but refuses writes (a standby after a failover, here
    default_transaction_read_only): submissions and decisions get 503 with reason
    read_only, /health says down, reads work; once writes work again the node recovers
    by itself and the refused calls changed nothing."""
    node = DaemonProcess(tmp_path / "node", daemon={"database": private_pg.url,
                                                    "heartbeat": "1s"})
    steps = [{"tool": "send_webhook", "args": {"url": "http://127.0.0.1:9/x", "payload": {}}}]
    node.start()
    try:
        waiting = node.submit(steps)
        wait_for(lambda: node.task(waiting)["state"] == "waiting_approval", "the request")
        set_read_only(private_pg, True)
        try:
            refused = None
            for _ in range(100):
                r = httpx.post(f"{node.url}/tasks", json={"goal": "more", "steps": steps},
                               timeout=30)
                if r.status_code != 202:
                    refused = r
                    break
                time.sleep(0.05)
            assert refused is not None and refused.status_code == 503, refused
            assert refused.json()["reason"] == "read_only" and refused.headers["Retry-After"]
            decided = httpx.post(f"{node.url}/tasks/{waiting}/deny", json={}, timeout=30)
            assert decided.status_code == 503 and decided.json()["reason"] == "read_only"
            wait_for(lambda: health_now(node)[0] == 503, "/health to say down")
            code, body = health_now(node)
            assert code == 503 and body["status"] == "down" and "read-only" in body["problems"][0]
            assert httpx.get(f"{node.url}/tasks", timeout=10).status_code == 200
            assert node.proc is not None and node.proc.poll() is None
        finally:
            set_read_only(private_pg, False)
        wait_for(node.healthy, "/health to recover once writes work", timeout=30)
        assert node.task(waiting)["state"] == "waiting_approval"  # the 503 changed nothing
        assert node.approve(waiting).status_code == 200
        node.submit(steps)
    finally:
        node.stop()


def set_read_only(pg: PrivatePostgres, on: bool) -> None:
    """Make every session of the cluster read-only by default (or not), at once."""
    conninfo = pg.conninfo + " options='-c default_transaction_read_only=off'"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        if on:
            admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
        admin.execute("SELECT pg_reload_conf()")


async def test_outside_requests_are_whole_or_absent_across_a_postgresql_crash(
        private_pg: PrivatePostgres) -> None:
    """PostgreSQL crashes (immediate stop) and comes back under a store that keeps taking
    outside requests and decisions on its pipelined path: each one is stored whole (its
    request row, its audit event) or refused as an outage and absent, never half-written,
    and the audit chain verifies afterwards."""
    from signoff.errors import StoreError
    from signoff.runtime import audit
    from signoff.runtime.models import ApprovalStatus, AuditEvent
    from signoff.runtime.store.port import Change
    from signoff.runtime.store.postgres.store import PgTaskStore
    from tests.integration.runtime.store.test_store import NOW
    from tests.integration.runtime.store.test_store_requests import new, request

    store = PgTaskStore(url=private_pg.url)
    await store.open()
    outcomes: dict[str, bool] = {}  # request id -> stored (False: refused as an outage)

    async def ask(n: int) -> None:
        try:
            stored = await store.commit(new(request(n, key=f"k{n}"),
                                            AuditEvent(kind="evaluation", approval_id=f"a-{n}")))
        except StoreError:
            stored = False
        outcomes[f"a-{n}"] = stored

    try:
        for n in range(5):
            await ask(n)
        await asyncio.to_thread(private_pg.restart, "immediate")
        # The pool's connections died with the server: the first requests on them are
        # refused as an outage (two, as measured), the later ones find new connections.
        for n in range(5, 30):
            await ask(n)
        assert all(outcomes[f"a-{n}"] for n in range(5)) and outcomes["a-29"]
        decided = (await store.get_approval("a-29"))
        assert decided is not None
        decided = decided.model_copy(update={"status": ApprovalStatus.APPROVED,
                                             "decided_by": "web:bob", "decided_at": NOW})
        assert await store.commit(Change(at=NOW, approval=decided,
                                         approval_expect=ApprovalStatus.PENDING,
                                         audit=[AuditEvent(kind="decision",
                                                           approval_id="a-29")]))
        for approval_id, stored in outcomes.items():
            found = await store.get_approval(approval_id)
            assert (found is not None) == stored, approval_id
            assert (await store.find_request(f"k{approval_id[2:]}") is not None) == stored
        events = [e for e in await store.audit_chain() if e.approval_id]
        assert sorted(e.approval_id for e in events if e.kind == "evaluation") == sorted(
            a for a, stored in outcomes.items() if stored)
        assert (await audit.verify(store)).ok
    finally:
        await store.close()
