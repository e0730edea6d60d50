"""Real daemons on one PostgreSQL database, one of them frozen (SIGSTOP: a suspended VM, a
long GC, a laptop lid) at the worst moments and thawed (SIGCONT):

- inside a decision's transaction, holding the audit chain's head row: the other node's
  decisions do not hang (they give up on lock_timeout, answer 503 and succeed on a
  retry once the server has ended the frozen session); nothing is doubled;
- while running an approved SEND against a slow sink and polling Telegram, past its
  lease: the other node takes the task and the poller over; thawed, the frozen node
  neither re-runs the effect, nor overwrites the task, nor polls Telegram again.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from signoff.runtime.store.postgres.notify import libpq_url
from tests.e2e.daemons import DaemonProcess, wait_for
from tests.e2e.test_cluster_telegram import TAKEOVER, ThreadedTelegram, polling
from tests.e2e.traffic import EchoThread

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(180)]

LOCK_TIMEOUT = 10.0  # the store's sessions' lock_timeout (rows.LOCK_TIMEOUT)
IDLE_IN_TRANSACTION = 15.0  # and idle_in_transaction_session_timeout


def hooked(host: str, telegram: ThreadedTelegram | None) -> str:
    """The TOML of a node's Telegram surface, reaching the fake Bot API as ``host`` (to
    tell the nodes' getUpdates apart); none without ``telegram``."""
    if telegram is None:
        return ""
    fake_url = telegram.fake.base_url
    return telegram.toml().replace(fake_url, fake_url.replace("127.0.0.1", host))


@pytest.fixture
def frozen_safe() -> Iterator[list[DaemonProcess]]:
    """The test's nodes: each thawed (SIGCONT) and stopped afterwards, whatever happens."""
    nodes: list[DaemonProcess] = []
    yield nodes
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGCONT)
        node.stop()


def two_nodes(tmp_path: Path, pg_url: str, nodes: list[DaemonProcess],
              telegram: ThreadedTelegram | None = None, **daemon: Any) -> list[DaemonProcess]:
    for i, host in enumerate(("127.0.0.1", "localhost")):
        nodes.append(DaemonProcess(tmp_path / f"node{i}", extra_toml=hooked(host, telegram),
                                   daemon={"database": pg_url, **daemon}))
    for node in nodes:  # one polls Telegram, the other stands by
        node.start()
    return nodes


def send(node: DaemonProcess, url: str, n: int) -> str:
    """A SEND task waiting for approval on ``node``."""
    task_id = node.submit([{"tool": "send_webhook", "args": {"url": url, "payload": {"n": n}}}])
    wait_for(lambda: node.task(task_id)["state"] == "waiting_approval", "the request")
    return task_id


def decisions(node: DaemonProcess, task_id: str) -> list[Any]:
    audit = httpx.get(f"{node.url}/audit", params={"task": task_id}, timeout=10).json()["items"]
    return [e["decision"] for e in audit if e["kind"] == "decision"]


def audit_verifies(node: DaemonProcess) -> None:
    verify = subprocess.run([sys.executable, "-m", "signoff", "audit", "--verify", "--config",
                             str(node.config)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def waiting_on_audit_insert(admin: psycopg.Connection[Any]) -> bool:
    """A session of this database waits for the audit table, inside its transaction."""
    row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                        "current_database() AND wait_event_type = 'Lock' "
                        "AND query ILIKE 'INSERT INTO audit %%'").fetchone()
    return bool(row and row[0])


def test_a_node_frozen_holding_the_audit_head_does_not_stall_the_others_decisions(
        tmp_path: Path, pg_url: str, frozen_safe: list[DaemonProcess]) -> None:
    """One node is frozen inside a decision, between locking the audit chain's head row
    and its commit; the other node's decision answers 503 (lock_timeout) instead of
    hanging and succeeds on a retry once the server has ended the frozen session; after
    the thaw the frozen node's decision is refused as a whole and succeeds when sent
    again; each task ran once and was decided once, and the audit chain verifies."""
    sink = EchoThread()
    with sink as echo:
        frozen, other = two_nodes(tmp_path, pg_url, frozen_safe)
        first, second = (send(node, echo.url("/hook"), n)
                         for n, node in enumerate((frozen, other)))
        answers: dict[str, httpx.Response] = {}
        with psycopg.connect(libpq_url(pg_url)) as admin:
            # The test holds the audit table: the frozen node's decision stops at its
            # insert, after locking the head row, until the test lets go.
            admin.execute("LOCK TABLE audit IN SHARE MODE")
            deciding = threading.Thread(target=lambda: answers.setdefault(
                "frozen", frozen.approve(first)), daemon=True)
            deciding.start()
            with psycopg.connect(libpq_url(pg_url), autocommit=True) as watch:
                wait_for(lambda: waiting_on_audit_insert(watch), "the decision to reach "
                         "the audit insert", timeout=LOCK_TIMEOUT / 2)
            assert frozen.proc is not None
            frozen.proc.send_signal(signal.SIGSTOP)
            admin.commit()  # its insert goes on: it holds the head row, frozen
        tries, started = [], time.monotonic()
        while True:
            began = time.monotonic()
            r = other.approve(second)
            tries.append((r.status_code, time.monotonic() - began))
            if r.status_code != 503:
                break
            assert r.json()["reason"] == "database_unavailable" and r.headers["Retry-After"]
        assert r.status_code == 200, r.text
        assert tries[0][0] == 503, tries  # the frozen node did hold the head row
        assert len(tries) <= 3, tries  # a bounded number of retries, none hanging
        assert all(spent < LOCK_TIMEOUT + 5 for _, spent in tries), tries
        assert time.monotonic() - started < IDLE_IN_TRANSACTION + LOCK_TIMEOUT, tries

        frozen.proc.send_signal(signal.SIGCONT)
        deciding.join(60)
        assert answers["frozen"].status_code == 503, answers["frozen"].text  # rolled back
        wait_for(frozen.healthy, "the thawed node to say ok")
        assert frozen.task(first)["state"] == "waiting_approval"  # nothing half-applied
        assert frozen.approve(first).status_code == 200
        for task_id in (first, second):
            wait_for(lambda t=task_id: other.task(t)["state"] == "completed", "the tasks")
            assert decisions(other, task_id) == ["approve"]
        assert sorted(r.json()["n"] for r in echo.requests if r.path == "/hook") == [0, 1]
        assert frozen.proc.poll() is None and other.proc is not None \
            and other.proc.poll() is None
        audit_verifies(other)


def gets_from(telegram: ThreadedTelegram, host: str) -> int:
    return int(telegram.call(lambda f: sum(1 for c in f.calls_to("getUpdates")
                                           if c.host.startswith(host))))


HOSTS = ("127.0.0.1", "localhost")
ROUNDS = 3


def test_a_node_frozen_mid_send_past_its_lease_neither_resends_nor_overwrites_nor_polls(
        tmp_path: Path, pg_url: str, frozen_safe: list[DaemonProcess]) -> None:
    """Three times, the node that polls Telegram is frozen while its approved SEND is
    held by a slow sink, past its lease: the other node takes the poller over and sends
    the task back to a person ("outcome unknown"). Thawed, and its request answered, the
    frozen node writes nothing over that, sends nothing again, polls no more: the sink
    saw each SEND exactly once."""
    sink = EchoThread()
    with ThreadedTelegram() as telegram, sink as echo:
        nodes = two_nodes(tmp_path, pg_url, frozen_safe, telegram, lease="3s",
                          heartbeat="1s")
        wait_for(lambda: len(polling(nodes)) == 1, "one node to poll")
        wait_for(lambda: any("leadership_standby" in n.log_text() for n in nodes),
                 "the other to stand by")
        for n in range(ROUNDS):
            [leader] = polling(nodes)
            other = next(node for node in nodes if node is not leader)
            host = HOSTS[nodes.index(leader)]
            task_id = send(leader, echo.url(f"/held?key={n}"), n)
            assert leader.approve(task_id).status_code == 200
            wait_for(lambda k=n: held(echo, k) == 1, "the SEND to reach the slow sink")
            stopped = leader.log_text().count("telegram_polling_stopped")
            assert leader.proc is not None
            leader.proc.send_signal(signal.SIGSTOP)
            try:
                wait_for(lambda o=other: polling([o]) == [o], "the other node to poll",
                         timeout=TAKEOVER + 20)
                wait_for(lambda t=task_id, o=other: sent_back(o, t),
                         "the task to go back to a person")
                before = gets_from(telegram, host)
                taken = other.task(task_id)
            finally:
                leader.proc.send_signal(signal.SIGCONT)
            sink.release(str(n))
            wait_for(lambda t=task_id, f=leader: f"task_changed_elsewhere task_id={t}"
                     in f.log_text() or f"lease_lost_before_effect task_id={t}"
                     in f.log_text(), "the thawed node to give the task up")
            wait_for(lambda f=leader, s=stopped: f.log_text().count(
                "telegram_polling_stopped") > s, "the thawed node to stop polling")
            time.sleep(1)  # room for a wrong getUpdates or write to show
            assert gets_from(telegram, host) == before
            assert polling(nodes) == [other]
            assert held(echo, n) == 1  # sent once: not again after the thaw
            assert kept(other.task(task_id)) == kept(taken)  # not overwritten
            assert leader.proc.poll() is None
        audit_verifies(nodes[0])


def held(echo: Any, key: int) -> int:
    return sum(1 for r in echo.requests if r.path == "/held" and r.json()["n"] == key)


def kept(task: dict[str, Any]) -> tuple[Any, ...]:
    """What a stale write would change: the state, the request, the history."""
    assert task["state"] == "waiting_approval"
    return task["state"], task["approval"]["id"], task["updated_at"], task["actions"]


def sent_back(node: DaemonProcess, task_id: str) -> bool:
    """The task waits for a person again, as after a crash mid-send."""
    pending = httpx.get(f"{node.url}/approvals", params={"limit": 200}, timeout=10)
    return any(a["task_id"] == task_id and "outcome unknown" in (a["note"] or "")
               for a in pending.json()["items"])
