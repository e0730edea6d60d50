"""Delivery failover on the real Slack and Telegram adapters (local fakes) and the web
console: a card Slack never takes is announced under the Telegram card and in the
console, and ``/health`` lists it until the request is decided."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest

from signoff.adapters.slack import SlackSurface
from signoff.adapters.telegram import TelegramSurface
from signoff.adapters.web import WebSurface
from signoff.api.app import create_app
from signoff.bot.outbox import MAX_ATTEMPTS
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Scope, Task, TaskState
from signoff.wiring import Node, api_context
from tests.factories import start, webhook
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack
from tests.fakes.telegram_api import FakeTelegramApi

CHAT = "-1001234567890"
ALICE = "U0ALICE"


@dataclass
class Rig:
    """A node on Slack and Telegram fakes, with its HTTP API."""

    node: Node
    clock: FakeClock
    slack: FakeSlack
    telegram: FakeTelegramApi
    api: httpx.AsyncClient
    web: WebSurface

    async def health(self) -> dict[str, Any]:
        """``GET /health``."""
        response = await self.api.get("/health")
        assert response.status_code == 200
        body: dict[str, Any] = response.json()
        return body

    async def exhaust_slack(self) -> None:
        """Run the outbox until Slack's card post has failed every attempt."""
        for _ in range(MAX_ATTEMPTS + 2):
            self.clock.advance(timedelta(seconds=61))  # past any backoff
            await self.node.flow.dispatcher.run_once()


@pytest.fixture
async def rig(node_factory: Any) -> AsyncIterator[Rig]:
    """Slack (http mode) and Telegram adapters on fakes; approver slack:U0ALICE."""
    async with FakeSlack() as slack_api, FakeTelegramApi() as telegram_api:
        clock = FakeClock()
        slack = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                              signing_secret=SECRET, api_url=slack_api.api_url)
        telegram = TelegramSurface(bot_token=telegram_api.token, chat_id=CHAT,
                                    base_url=telegram_api.base_url,
                                    base_file_url=telegram_api.base_file_url)
        web = WebSurface()
        node = await node_factory({"approvals": {"approvers": [f"slack:{ALICE}"]}},
                                  clock=clock, approvers=(),
                                  surfaces={"slack": slack, "telegram": telegram, "web": web})
        ctx = api_context(node.settings, store=node.store, engine=node.engine,
                          decider=node.decider, flow=node.flow, clock=node.clock,
                          wake=node.worker.wake, web=web)
        transport = httpx.ASGITransport(app=create_app(ctx))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
            yield Rig(node, clock, slack_api, telegram_api, api, web)
        await telegram.aclose()


async def waiting(rig: Rig) -> Task:
    """A task waiting for a decision on its webhook, Slack refusing every post."""
    rig.slack.fail_next("chat.postMessage", count=10_000, status=503)
    task = await start(rig.node, [webhook("http://127.0.0.1:9/hook")])
    assert task.state is TaskState.WAITING_APPROVAL and task.approval is not None
    return task


async def test_a_card_slack_never_takes_is_announced_on_telegram_and_in_health(
        rig: Rig) -> None:
    """After the last retry the Telegram card gets a reply saying the Slack card is missing
    (mentioning the approver), and /health lists it with the error and since when."""
    task = await waiting(rig)
    assert task.approval is not None
    [tg_card] = rig.telegram.chat_messages(CHAT)
    assert (await rig.health())["undelivered"] == []  # still retrying: not given up yet

    await rig.exhaust_slack()

    assert rig.slack.messages == {}
    notes = [m for m in rig.telegram.chat_messages(CHAT) if m.reply_to == tg_card.message_id]
    [note] = notes
    assert note.text.startswith("Could not deliver the card for ")
    assert "to Slack" in note.text and "decide here" in note.text
    assert note.text.endswith(f"slack:{ALICE}")
    [(_, console_note, _)] = rig.web.notes  # the console's Notes list says so too
    assert console_note.startswith("Could not deliver the card for ") and "Slack" in console_note
    [missing] = (await rig.health())["undelivered"]
    assert (missing["approval_id"], missing["surface"]) == (task.approval.id, "slack")
    assert missing["error"] and missing["since"]

    await rig.exhaust_slack()  # more rounds: nothing is announced twice
    assert len([m for m in rig.telegram.chat_messages(CHAT) if m.reply_to]) == 1


async def test_the_undelivered_entry_is_cleared_once_the_request_is_decided(rig: Rig) -> None:
    """Deciding (here on Telegram's side of things, by the approver) clears the entry."""
    task = await waiting(rig)
    assert task.approval is not None
    await rig.exhaust_slack()
    assert len((await rig.health())["undelivered"]) == 1

    result = await rig.node.decider.decide(task.approval.id, Scope.DENY, f"slack:{ALICE}")
    assert result.accepted
    assert (await rig.health())["undelivered"] == []


async def test_a_card_that_was_delivered_raises_no_alarm(rig: Rig) -> None:
    """A post that succeeds after a few failures is neither announced nor listed."""
    rig.slack.fail_next("chat.postMessage", count=2, status=503)
    await start(rig.node, [webhook("http://127.0.0.1:9/hook")])
    await rig.exhaust_slack()
    assert len(rig.slack.messages) == 1
    assert [m for m in rig.telegram.chat_messages(CHAT) if m.reply_to] == []
    assert (await rig.health())["undelivered"] == []


async def test_a_card_telegram_refuses_is_announced_in_the_slack_thread(rig: Rig) -> None:
    """A final refusal (no retries) is announced at once: a Slack thread reply under the
    card, broadcast to the channel, mentioning the approver."""
    rig.telegram.fail_next(1, status=400, method="sendMessage")
    task = await start(rig.node, [webhook("http://127.0.0.1:9/hook")])
    assert task.approval is not None
    await rig.node.flow.dispatcher.run_once()

    (channel, ts), _ = list(rig.slack.messages)  # the card and the reply under it
    reply = rig.slack.calls_to("chat.postMessage")[-1].body
    assert (reply["channel"], reply["thread_ts"], reply["reply_broadcast"]) == (channel, ts, True)
    assert "to Telegram" in reply["text"] and reply["text"].endswith(f"<@{ALICE}>")
    [missing] = (await rig.health())["undelivered"]
    assert (missing["approval_id"], missing["surface"]) == (task.approval.id, "telegram")
