"""Escalation as people see it on the real Slack and Telegram adapters (local fakes): the
card is edited, and a new message under it notifies whoever is asked now."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from signoff.adapters.slack import SlackSurface
from signoff.adapters.telegram import TelegramSurface
from signoff.bot.outbox import FOREVER
from signoff.bot.routing.escalation import Escalator
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Task, TaskState
from signoff.runtime.schedule.scheduler import Scheduler
from signoff.wiring import Node
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack
from tests.fakes.telegram_api import FakeTelegramApi

CHAT = "-1001234567890"
PRIMARY, SECONDARY = "U0PRIMARY", "U0SECOND"


@dataclass
class Chats:
    """A node whose surfaces are the real Slack and Telegram adapters on fakes."""

    node: Node
    clock: FakeClock
    slack: FakeSlack
    telegram: FakeTelegramApi
    escalator: Escalator

    async def fire(self) -> Task:
        """Fire the schedule and run the task up to its approval request."""
        scheduler = Scheduler(engine=self.node.engine,
                              schedules=[s.to_runtime() for s in self.node.settings.schedules])
        task = await scheduler.fire("nightly", self.clock.now())
        assert task is not None
        cfg = self.node.engine.config
        claimed = await self.node.store.claim_next(cfg.node_id, self.clock.now() + cfg.lease)
        assert claimed is not None
        return await self.node.engine.advance(claimed)


@pytest.fixture
async def chats(node_factory: Any) -> AsyncIterator[Chats]:
    """Slack (http mode) and Telegram adapters on fakes, on-call primary → secondary."""
    async with FakeSlack() as slack_api, FakeTelegramApi() as telegram_api:
        clock = FakeClock()
        slack = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                              signing_secret=SECRET, api_url=slack_api.api_url)
        telegram = TelegramSurface(bot_token=telegram_api.token, chat_id=CHAT,
                                    base_url=telegram_api.base_url,
                                    base_file_url=telegram_api.base_file_url)
        config = {
            "schedules": [{"name": "nightly", "cron": "0 3 * * *", "cron_mode": "ask",
                           "steps": [{"tool": "send_webhook", "args": {
                               "url": "http://127.0.0.1:9/hook", "payload": {}}}]}],
            "oncall": {"rotations": [
                {"name": "primary", "members": [f"slack:{PRIMARY}"], "escalate_after": "10m",
                 "next": "secondary"},
                {"name": "secondary", "members": [f"slack:{SECONDARY}"]}]},
        }
        node = await node_factory(config, clock=clock, approvers=(),
                                  surfaces={"slack": slack, "telegram": telegram})
        oncall = node.settings.oncall
        escalator = Escalator(decider=node.decider, clock=clock,
                              rotations=[r.to_runtime() for r in oncall.rotations],
                              overrides=[o.to_runtime() for o in oncall.overrides])
        yield Chats(node, clock, slack_api, telegram_api, escalator)
        await telegram.aclose()


async def test_escalation_notifies_on_slack_and_telegram(
        chats: Chats, caplog: pytest.LogCaptureFixture) -> None:
    """Slack gets a broadcast thread reply mentioning the approvers, Telegram a reply to the
    card; an edit Telegram finds unchanged ("message is not modified") counts as done."""
    caplog.set_level(logging.INFO)
    task = await chats.fire()
    assert task.state is TaskState.WAITING_APPROVAL
    await chats.node.flow.dispatcher.run_once()
    [(channel, ts)] = list(chats.slack.messages)
    [tg_card] = chats.telegram.chat_messages(CHAT)

    chats.clock.advance(timedelta(minutes=10))
    assert len(await chats.escalator.tick()) == 1
    await chats.node.flow.dispatcher.run_once()

    [edit] = chats.slack.calls_to("chat.update")
    assert f"<@{SECONDARY}>" in edit.body["text"]
    reply = chats.slack.calls_to("chat.postMessage")[-1].body
    assert (reply["channel"], reply["thread_ts"], reply["reply_broadcast"]) == (channel, ts, True)
    assert reply["text"].endswith(f"Your answer is needed: <@{PRIMARY}>, <@{SECONDARY}>")

    [tg_edit] = chats.telegram.calls_to("editMessageText")
    assert tg_edit.status == 400  # nothing Telegram shows changed on the card
    tg_reply = chats.telegram.chat_messages(CHAT)[-1]
    assert tg_reply.reply_to == tg_card.message_id
    assert tg_reply.text.endswith(f"Your answer is needed: slack:{PRIMARY}, slack:{SECONDARY}")

    assert await chats.node.store.due_outbox(FOREVER) == []  # all delivered, none given up
    failures = ("platform_rejected", "platform_call_failed", "platform_rate_limited")
    assert not [r for r in caplog.records if r.getMessage() in failures]


async def test_escalated_slack_card_still_names_the_first_on_call(chats: Chats) -> None:
    """After an escalation the edited Slack card still mentions the on-call asked first,
    beside the escalation target: both are asked now."""
    await chats.fire()
    await chats.node.flow.dispatcher.run_once()
    [post] = chats.slack.calls_to("chat.postMessage")
    assert f"<@{PRIMARY}>" in post.body["text"]

    chats.clock.advance(timedelta(minutes=10))
    assert len(await chats.escalator.tick()) == 1
    await chats.node.flow.dispatcher.run_once()

    [edit] = chats.slack.calls_to("chat.update")
    assert f"<@{PRIMARY}> <@{SECONDARY}>" in edit.body["text"]
    needed = [b for b in edit.body["blocks"] if "your answer is needed" in str(b)]
    assert needed and f"<@{PRIMARY}>" in str(needed[0])
