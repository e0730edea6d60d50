"""Reminders as people see them on the real Slack and Telegram adapters (local fakes): one
new message under the card, ``remind_before`` before expiry, naming who is asked now."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from signoff.adapters.slack import SlackSurface
from signoff.adapters.telegram import TelegramSurface
from signoff.bot.outbox import FOREVER
from signoff.bot.routing.reminders import Reminder
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Scope, Task, TaskState
from signoff.runtime.schedule.scheduler import Scheduler
from signoff.wiring import Node, api_providers, build_reminder
from tests.factories import start, webhook
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack
from tests.fakes.telegram_api import FakeTelegramApi

CHAT = "-1001234567890"
ALICE, BOB = "U0ALICE", "42"


@dataclass
class Chats:
    """Nodes (one database) whose surfaces are the real Slack and Telegram adapters."""

    make: Callable[..., Any]
    clock: FakeClock
    slack: FakeSlack
    telegram: FakeTelegramApi
    closers: list[TelegramSurface]

    async def node(self, extra: dict[str, Any] | None = None, database: str | None = None,
                   **approvals: Any) -> Node:
        """A node of this database with fresh adapters (a restarted daemon)."""
        slack = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                              signing_secret=SECRET, api_url=self.slack.api_url)
        telegram = TelegramSurface(bot_token=self.telegram.token, chat_id=CHAT,
                                    base_url=self.telegram.base_url,
                                    base_file_url=self.telegram.base_file_url)
        self.closers.append(telegram)
        config = {"approvals": {"approvers": [f"slack:{ALICE}", f"telegram:{BOB}"],
                                "remind_before": "5m", "timeout": "30m", **approvals},
                  **(extra or {})}
        node: Node = await self.make(config, clock=self.clock, approvers=(), database=database,
                                     surfaces={"slack": slack, "telegram": telegram})
        return node

    def replies(self) -> list[dict[str, Any]]:
        """Slack thread replies, oldest first."""
        return [c.body for c in self.slack.calls_to("chat.postMessage")
                if c.body.get("thread_ts")]


@pytest.fixture
async def chats(node_factory: Any) -> AsyncIterator[Chats]:
    """Slack (http mode) and Telegram fakes, and a clock every node shares."""
    async with FakeSlack() as slack_api, FakeTelegramApi() as telegram_api:
        rig = Chats(node_factory, FakeClock(), slack_api, telegram_api, [])
        yield rig
        for telegram in rig.closers:
            await telegram.aclose()


def reminder(node: Node) -> Reminder:
    """The node's reminder service, as the daemon builds it."""
    built = build_reminder(node)
    assert built is not None
    return built


async def waiting(node: Node) -> Task:
    """A task whose webhook waits for a decision, its cards posted."""
    task = await start(node, [webhook("http://127.0.0.1:9/hook")])
    assert task.state is TaskState.WAITING_APPROVAL
    return task


async def test_a_reminder_is_a_reply_under_the_card_that_mentions_the_approvers(
        chats: Chats) -> None:
    """At 5 minutes before expiry Slack gets a broadcast thread reply mentioning the
    approvers and Telegram a reply to the card; once, however often the tick runs."""
    node = await chats.node()
    await waiting(node)
    [(channel, ts)] = list(chats.slack.messages)
    [tg_card] = chats.telegram.chat_messages(CHAT)
    remind = reminder(node)

    chats.clock.advance(timedelta(minutes=24, seconds=59))
    assert await remind.tick() == []  # 5m01s left: not yet
    chats.clock.advance(timedelta(seconds=1))
    assert len(await remind.tick()) == 1
    await node.flow.dispatcher.run_once()

    [reply] = chats.replies()
    assert (reply["channel"], reply["thread_ts"], reply["reply_broadcast"]) == (channel, ts, True)
    assert "expires in 5m" in reply["text"]
    assert reply["text"].endswith(f"Your answer is needed: <@{ALICE}>, telegram:{BOB}")
    tg_reply = chats.telegram.chat_messages(CHAT)[-1]
    assert tg_reply.reply_to == tg_card.message_id
    assert tg_reply.text.endswith(f"Your answer is needed: slack:{ALICE}, telegram:{BOB}")
    [entity] = chats.telegram.calls_to("sendMessage")[-1].params["entities"]
    assert entity["type"] == "text_mention" and entity["user"]["id"] == int(BOB)
    assert tg_reply.text[entity["offset"]:][:entity["length"]] == f"telegram:{BOB}"

    chats.clock.advance(timedelta(minutes=1))
    assert await remind.tick() == []
    await node.flow.dispatcher.run_once()
    assert len(chats.replies()) == 1 and len(chats.telegram.chat_messages(CHAT)) == 2
    assert await node.store.due_outbox(FOREVER) == []  # delivered, none given up


async def test_exactly_one_reminder_across_a_restart_and_a_second_node(
        chats: Chats, store_url: str) -> None:
    """A node that queued the reminder and died before delivering it, its restart and
    another node of the same database all tick: one reminder reaches each surface."""
    first = await chats.node(database=store_url)
    await waiting(first)
    chats.clock.advance(timedelta(minutes=26))
    assert len(await reminder(first).tick()) == 1  # queued, never delivered: "killed"

    restarted, other = await chats.node(database=store_url), await chats.node(database=store_url)
    for node in (restarted, other):
        assert len(await reminder(node).tick()) == 1  # it tries; the outbox key keeps one
    for node in (restarted, other):
        await node.flow.dispatcher.run_once()

    [reply] = chats.replies()
    assert "expires in 4m" in reply["text"]
    assert len([m for m in chats.telegram.chat_messages(CHAT) if m.reply_to]) == 1


async def test_no_reminder_for_a_decided_or_a_short_lived_request(chats: Chats) -> None:
    """A request answered before its time, or one whose whole life is shorter than
    ``remind_before``, gets no reminder."""
    node = await chats.node(timeout="3m")
    await waiting(node)
    remind = reminder(node)
    for _ in range(4):
        assert await remind.tick() == []
        chats.clock.advance(timedelta(seconds=50))

    # The short-lived request is still pending in the same database: without coalescing
    # off this identical one would share its card instead of having its own.
    long_lived = await chats.node(coalesce=False)
    task = await waiting(long_lived)
    assert task.approval is not None
    result = await long_lived.decider.decide(task.approval.id, Scope.DENY, f"slack:{ALICE}")
    assert result.accepted
    chats.clock.advance(timedelta(minutes=27))
    assert await reminder(long_lived).tick() == []
    await long_lived.flow.dispatcher.run_once()
    assert [r["text"] for r in chats.replies()] == [f"Task {task.id} failed: user denied"]


async def test_a_reminder_queued_before_the_answer_is_not_sent(chats: Chats) -> None:
    """Answered between the tick and the delivery: nobody is asked for an answer given."""
    node = await chats.node()
    task = await waiting(node)
    assert task.approval is not None
    chats.clock.advance(timedelta(minutes=26))
    assert len(await reminder(node).tick()) == 1
    result = await node.decider.decide(task.approval.id, Scope.DENY, f"slack:{ALICE}")
    assert result.accepted
    await node.flow.dispatcher.run_once()
    assert not [r for r in chats.replies() if "Reminder" in r["text"]]
    assert not [m for m in chats.telegram.chat_messages(CHAT) if "Reminder" in m.text]


async def test_a_scheduled_run_reminds_whoever_is_on_call(chats: Chats) -> None:
    """A scheduled run parked for on-call (``cron_mode = "ask"``) reminds the on-call
    member, mentioned in the Slack thread."""
    node = await chats.node(extra={
        "schedules": [{"name": "nightly", "cron": "0 3 * * *", "cron_mode": "ask",
                       "steps": [{"tool": "send_webhook", "args": {
                           "url": "http://127.0.0.1:9/hook", "payload": {}}}]}],
        "oncall": {"rotations": [{"name": "primary", "members": ["slack:U0ONCALL"]}]}})
    scheduler = Scheduler(engine=node.engine,
                          schedules=[s.to_runtime() for s in node.settings.schedules])
    fired = await scheduler.fire("nightly", chats.clock.now())
    assert fired is not None
    cfg = node.engine.config
    claimed = await node.store.claim_next(cfg.node_id, chats.clock.now() + cfg.lease)
    assert claimed is not None
    assert (await node.engine.advance(claimed)).state is TaskState.WAITING_APPROVAL
    await node.flow.dispatcher.run_once()

    chats.clock.advance(timedelta(minutes=26))
    assert len(await reminder(node).tick()) == 1
    await node.flow.dispatcher.run_once()
    [reply] = chats.replies()
    assert reply["text"].endswith("<@U0ONCALL>") and reply["reply_broadcast"] is True


async def test_remind_before_is_off_unless_set(node_factory: Any) -> None:
    """Without ``approvals.remind_before`` the daemon runs no reminder service; with it,
    the daemon's services include it."""
    node = await node_factory()
    assert build_reminder(node) is None
    assert "reminders" not in dict(api_providers(node)[2])
    node = await node_factory({"approvals": {"remind_before": "5m"}})
    assert "reminders" in dict(api_providers(node)[2])
