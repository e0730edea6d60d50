"""Quorum and the undo window through the whole daemon, with Slack (http mode) and
Telegram (polling) on local fakes: one approval from each surface, "1 of 2 approvals" on
every card, an Undo button on every card during the hold."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.config.settings import Settings
from tests.e2e.test_daemon_surfaces import CHAT, serving, until
from tests.fakes.slack_api import (
    APPROVALS,
    BOT_TOKEN,
    SECRET,
    FakeSlack,
    block_actions_payload,
    find_button,
    message_text,
    signed_interaction,
)
from tests.fakes.telegram_api import FakeTelegramApi, user


@dataclass
class Chats:
    """A running daemon, its HTTP client, both fakes and its work directory."""

    http: httpx.AsyncClient
    slack: FakeSlack
    telegram: FakeTelegramApi
    work: Path

    async def click(self, action_id: str, user_id: str = "U0ALICE") -> None:
        """Click a button of the (only) Slack card as ``user_id``."""
        ts = next(ts for (ch, ts) in self.slack.messages if ch == APPROVALS)
        message = self.slack.message(APPROVALS, ts)
        button = find_button(message, action_id)
        assert button is not None, (action_id, message_text(message))
        payload = block_actions_payload(channel=APPROVALS, message_ts=ts, action_id=action_id,
                                        value=str(button["value"]), user_id=user_id,
                                        message=message)
        body, headers = signed_interaction(SECRET, payload)
        assert (await self.http.post("/slack/events", content=body, headers=headers)
                ).status_code == 200

    async def tap(self, label: str, sender_id: int = 42) -> str | None:
        """Tap a button of the (only) Telegram card; the toast it answered."""
        card = self.telegram.chat_messages(CHAT)[0]
        update = self.telegram.push_update(self.telegram.tap(
            CHAT, card.message_id, label, sender=user(sender_id, "bob", "Bob")))
        return await self.telegram.wait_answer(self.telegram.query_id(update))

    def slack_card(self) -> str:
        ts = next(ts for (ch, ts) in self.slack.messages if ch == APPROVALS)
        return str(self.slack.message(APPROVALS, ts))

    def telegram_card(self) -> Any:
        return self.telegram.chat_messages(CHAT)[0]

    async def task(self, task_id: str) -> dict[str, Any]:
        return dict((await self.http.get(f"/tasks/{task_id}")).json())


def settings_for(work: Path, slack: FakeSlack, telegram: FakeTelegramApi,
                 hold: str) -> Settings:
    return Settings.model_validate({
        "daemon": {"work_dir": str(work)},
        "approvals": {"approvers": ["slack:U0ALICE", "telegram:42"],
                      "hold": {"DESTRUCTIVE": hold}},
        "policy": {"quorum": {"fs.delete": 2}},
        "slack": {"mode": "http", "bot_token": BOT_TOKEN, "signing_secret": SECRET,
                  "channel": APPROVALS, "api_url": slack.api_url},
        "telegram": {"mode": "polling", "bot_token": telegram.token, "chat_id": CHAT,
                     "base_url": telegram.base_url, "base_file_url": telegram.base_file_url},
    })


@pytest.fixture
def hold() -> str:
    return "0s"


@pytest.fixture
async def chats(tmp_path: Path, hold: str) -> AsyncIterator[Chats]:
    async with FakeSlack() as slack, FakeTelegramApi() as telegram:
        work = tmp_path / "work"
        work.mkdir()
        (work / "old.txt").write_text("old")
        async with serving(settings_for(work, slack, telegram, hold)) as (_, http):
            await telegram.wait_call("getUpdates")
            yield Chats(http, slack, telegram, work)


async def delete_request(chats: Chats) -> str:
    r = await chats.http.post("/tasks", json={
        "goal": "clean up", "steps": [{"tool": "delete_file", "args": {"path": "old.txt"}}]})
    task_id = str(r.json()["id"])
    await chats.slack.wait_for_calls("chat.postMessage")
    await chats.telegram.wait_call("sendMessage")
    return task_id


async def test_one_approval_on_slack_and_one_on_telegram_make_the_quorum(
        chats: Chats) -> None:
    """Alice approves on Slack: she is told "1 of 2 approvals — waiting for one more", both
    cards show it; her second click counts once; Bob's tap on Telegram completes it."""
    task_id = await delete_request(chats)
    assert "0 of 2 approvals" in chats.telegram_card().text
    await chats.click("signoff_once")

    async def shown_everywhere() -> bool:
        return ("1 of 2 approvals" in chats.slack_card()
                and "1 of 2 approvals" in chats.telegram_card().text)

    await until(shown_everywhere, "both cards to show 1 of 2")
    await until(lambda: _true(any("waiting for one more" in t
                                  for t in chats.slack.ephemeral_texts())), "the feedback")
    assert (await chats.task(task_id))["state"] == "waiting_approval"
    await chats.click("signoff_once")
    await until(lambda: _true(any("counts once" in t for t in chats.slack.ephemeral_texts())),
                "the second click to be told it counts once")

    toast = await chats.tap("Once")
    assert toast is not None and "Approved once (2 of 2 approvals)" in toast

    async def completed() -> bool:
        return (await chats.task(task_id))["state"] == "completed"

    await until(completed, "the task to complete")
    assert not (chats.work / "old.txt").exists()
    await until(lambda: _true("alice, bob" in chats.telegram_card().text),
                "the card to name both approvers")
    audit = (await chats.http.get("/audit", params={"task": task_id})).json()["items"]
    assert [(e["kind"], e["actor"]) for e in audit if e["kind"] in (
        "approval_partial", "decision")] == [("approval_partial", "slack:U0ALICE"),
                                             ("decision", "telegram:42")]


@pytest.mark.parametrize("hold", ["30s"])
async def test_undo_on_telegram_during_the_hold_denies(chats: Chats) -> None:
    """After the quorum the request is held: both cards show Undo instead of the decision
    buttons; Bob's Undo on Telegram denies it ("undone by telegram:42") and the file stays."""
    task_id = await delete_request(chats)
    await chats.click("signoff_once")
    await until(lambda: _true("1 of 2" in chats.telegram_card().text), "the count")
    toast = await chats.tap("Once")
    assert toast is not None and "unless undone" in toast

    async def undo_everywhere() -> bool:
        return ("signoff_undo" in chats.slack_card()
                and chats.telegram_card().labels == ("Undo",))

    await until(undo_everywhere, "an Undo button on both cards")
    assert (await chats.task(task_id))["approval"]["status"] == "held"
    toast = await chats.tap("Undo")
    assert toast is not None and "Undone" in toast

    async def failed() -> bool:
        return (await chats.task(task_id))["state"] == "failed"

    await until(failed, "the task to be denied")
    assert (chats.work / "old.txt").exists()
    await until(lambda: _true("undone by telegram:42" in chats.telegram_card().text
                              and chats.telegram_card().labels == ()), "the card's outcome")
    audit = (await chats.http.get("/audit", params={"task": task_id})).json()["items"]
    kinds = [e["kind"] for e in audit]
    assert "decision" in kinds and kinds[-1] in ("undo", "task_failed") and "undo" in kinds


@pytest.mark.parametrize("hold", ["1s"])
async def test_a_held_action_runs_after_its_window(chats: Chats) -> None:
    """With a short hold and no Undo the action runs once the window is over."""
    task_id = await delete_request(chats)
    await chats.click("signoff_once")
    await until(lambda: _true("1 of 2" in chats.telegram_card().text), "the count")
    await chats.tap("Once")

    async def completed() -> bool:
        return (await chats.task(task_id))["state"] == "completed"

    await until(completed, "the task to complete after its hold")
    assert not (chats.work / "old.txt").exists()


async def _true(value: bool) -> bool:
    await asyncio.sleep(0)
    return value
