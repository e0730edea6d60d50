"""Three `signoff daemon start` processes on one PostgreSQL and one Telegram bot: one node
polls getUpdates (advisory-lock leadership), and when it is killed -9 another takes over,
with no update handled twice or lost.

The fake Bot API runs in a thread of the test process (the daemons are subprocesses) and
answers a second concurrent getUpdates with 409 Conflict, as Telegram does.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.e2e.daemons import DaemonProcess, toml_value, wait_for
from tests.e2e.test_cluster import Cluster, cluster  # noqa: F401 (the fixture)
from tests.fakes.telegram_api import FakeMessage, FakeTelegramApi

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

T = TypeVar("T")
CHAT = "-1001234567890"
TAKEOVER = 10.0  # the contract: another node polls within 10 s of the leader's death


class ThreadedTelegram:
    """`FakeTelegramApi` on its own event loop in a thread; `call` runs code on that loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.fake = FakeTelegramApi()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadedTelegram:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.__aenter__(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.__aexit__(None, None, None),
                                         self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def call(self, fn: Callable[[FakeTelegramApi], T]) -> T:
        """``fn(fake)`` on the fake's loop (its state is only touched there)."""
        done: Future[T] = Future()

        def run() -> None:
            try:
                done.set_result(fn(self.fake))
            except BaseException as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return done.result(10)

    def toml(self) -> str:
        fake = self.fake
        return "\n".join([
            "[approvals]", 'approvers = ["telegram:42"]',
            "[telegram]", 'mode = "polling"', f"bot_token = {toml_value(fake.token)}",
            f"chat_id = {toml_value(CHAT)}", f"base_url = {toml_value(fake.base_url)}",
            f"base_file_url = {toml_value(fake.base_file_url)}", ""])


@pytest.fixture
def telegram() -> Iterator[ThreadedTelegram]:
    with ThreadedTelegram() as threaded:
        yield threaded


def polling(nodes: list[DaemonProcess]) -> list[DaemonProcess]:
    """The nodes whose log says they poll now (started more often than stopped)."""
    return [n for n in nodes if n.log_text().count("telegram_polling_started")
            > n.log_text().count("telegram_polling_stopped")]


def card_of(telegram: ThreadedTelegram, task_id: str) -> FakeMessage | None:
    cards = telegram.call(lambda f: [m for m in f.chat_messages(CHAT) if task_id in m.text])
    return cards[0] if cards else None


def tap_once(telegram: ThreadedTelegram, card: FakeMessage) -> str:
    """Alice taps Once on the card; returns the callback query id."""
    return telegram.call(lambda f: f.query_id(f.push_update(f.tap(CHAT, card.message_id,
                                                                   "Once"))))


def gated(nodes: list[DaemonProcess], numbers: range, telegram: ThreadedTelegram
          ) -> list[tuple[str, FakeMessage]]:
    """Tasks that each wait for approval (``touch approved-<n>``), with their cards."""
    out = []
    for i in numbers:
        node = nodes[i % len(nodes)]
        task_id = node.submit([{"tool": "run_command",
                                "args": {"command": f"touch approved-{i}"}}])
        wait_for(lambda t=task_id, n=node: n.task(t)["state"] == "waiting_approval",
                 "the request")
        wait_for(lambda t=task_id: card_of(telegram, t) is not None, "its Telegram card")
        card = card_of(telegram, task_id)
        assert card is not None
        out.append((task_id, card))
    return out


def decisions(node: DaemonProcess, task_id: str) -> list[Any]:
    audit = httpx.get(f"{node.url}/audit", params={"task": task_id}, timeout=10).json()["items"]
    return [e["decision"] for e in audit if e["kind"] == "decision"]


def test_one_node_polls_telegram_and_another_takes_over_when_it_is_killed(
        telegram: ThreadedTelegram, cluster: Cluster) -> None:  # noqa: F811
    """Of three nodes one polls; taps are handled by it; kill -9 it, tap again, and another
    node polls within 10 s and handles those taps: every tap answered once, every task
    approved once, never two getUpdates consumers at a time.

    (``telegram`` before ``cluster``: the daemons stop before the fake Bot API does.)"""
    nodes = cluster(3, extra_toml=telegram.toml())
    wait_for(lambda: len(polling(nodes)) == 1, "one node to poll Telegram")
    wait_for(lambda: sum("leadership_standby" in n.log_text() for n in nodes) == 2,
             "the two others to stand by")
    [leader] = polling(nodes)

    before, after = gated(nodes, range(2), telegram), gated(nodes, range(2, 4), telegram)
    queries = [tap_once(telegram, card) for _, card in before]
    wait_for(lambda: all(nodes[0].task(t)["state"] == "completed" for t, _ in before),
             "the leader to handle the first taps")

    leader.kill()
    survivors = [n for n in nodes if n is not leader]
    queries += [tap_once(telegram, card) for _, card in after]  # while nobody polls
    wait_for(lambda: len(polling(survivors)) == 1, "another node to take over polling",
             timeout=TAKEOVER + 30)  # generous: the contract's 10 s plus a loaded machine
    wait_for(lambda: all(survivors[0].task(t)["state"] == "completed" for t, _ in after),
             "the new leader to handle the taps made while nobody polled", timeout=60)

    answered = telegram.call(lambda f: Counter(str(c.params.get("callback_query_id"))
                                               for c in f.calls_to("answerCallbackQuery")))
    assert {q: answered[q] for q in queries} == {q: 1 for q in queries}
    for task_id, _ in before + after:
        assert decisions(survivors[0], task_id) == ["approve"]
    ran = Counter(p.name for n in nodes for p in n.work.glob("approved-*"))
    assert ran == Counter(f"approved-{i}" for i in range(4))  # each command ran once
    assert telegram.call(lambda f: (f.max_consumers, f.conflicts)) == (1, 0)
    delivered = telegram.call(lambda f: dict(f.delivered))
    assert len(delivered) == len(queries)  # every tap reached a poller
    assert "telegram_polling_started" not in "".join(
        n.log_text() for n in survivors if n is not polling(survivors)[0])


def test_a_node_frozen_past_its_polling_lease_does_not_poll_again_when_thawed(
        telegram: ThreadedTelegram, tmp_path: Path, pg_url: str) -> None:
    """The polling node is frozen (SIGSTOP) long enough for another to take the lease
    over; thawed (SIGCONT), it stops polling without sending a single getUpdates more."""
    fake_url = telegram.fake.base_url
    hosts = ["127.0.0.1", "localhost"]  # one per node, to tell their getUpdates apart
    nodes = []
    for i, host in enumerate(hosts):
        toml = telegram.toml().replace(fake_url, fake_url.replace("127.0.0.1", host))
        nodes.append(DaemonProcess(tmp_path / f"node{i}", daemon={"database": pg_url},
                                   extra_toml=toml))
    frozen, other = nodes
    try:
        frozen.start()
        wait_for(lambda: polling([frozen]) == [frozen], "the first node to poll")
        other.start()
        wait_for(lambda: "leadership_standby" in other.log_text(), "the second to stand by")

        def polls_from(host: str) -> int:
            return telegram.call(lambda f: sum(1 for c in f.calls_to("getUpdates")
                                               if c.host.startswith(host)))

        assert frozen.proc is not None
        frozen.proc.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: polling([other]) == [other], "the other node to take over",
                     timeout=TAKEOVER + 30)
            before = polls_from("127.0.0.1")
        finally:
            frozen.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: "telegram_polling_stopped" in frozen.log_text(),
                 "the thawed node to notice it lost the lease", timeout=30)
        wait_for(lambda: polls_from("localhost") >= 2, "the new leader to go on polling")
        assert polls_from("127.0.0.1") == before
        assert polling(nodes) == [other]
        assert frozen.proc.poll() is None  # it stays up, standing by
    finally:
        for node in nodes:
            node.stop()
