"""Discord in the running daemon, over real HTTP: /health shows it, its interactions
endpoint is served on the daemon's port (signature checked, PING answered), and one
approval on Discord and one on Slack make a quorum whose outcome every card shows."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.config.settings import Settings
from tests.e2e.test_daemon_surfaces import serving, until
from tests.fakes.discord_api import APPROVALS as DISCORD_CHANNEL
from tests.fakes.discord_api import FakeDiscord, encode
from tests.fakes.slack_api import (
    APPROVALS,
    BOT_TOKEN,
    SECRET,
    FakeSlack,
    block_actions_payload,
    find_button,
    signed_interaction,
)

ALICE = "4242"


@dataclass
class Daemon:
    """A running daemon with Discord and Slack (http mode) on their fakes."""

    http: httpx.AsyncClient
    discord: FakeDiscord
    slack: FakeSlack
    work: Path

    async def interact(self, interaction: dict[str, Any], *,
                       signed_by: FakeDiscord | None = None) -> httpx.Response:
        """POST an interaction signed now, by the application's key unless told."""
        body = encode(interaction)
        headers = (signed_by or self.discord).sign(body, int(time.time()))
        return await self.http.post("/discord/interactions", content=body, headers=headers)

    def card(self) -> Any:
        return self.discord.channel_messages(DISCORD_CHANNEL)[0]


def settings(work: Path, discord: FakeDiscord, slack: FakeSlack) -> Settings:
    return Settings.model_validate({
        "daemon": {"work_dir": str(work)},
        "approvals": {"approvers": [f"discord:{ALICE}", "slack:U0ALICE"]},
        "policy": {"quorum": {"fs.delete": 2}},
        "discord": {"application_id": discord.application_id,
                    "public_key": discord.public_key, "bot_token": discord.bot_token,
                    "channel_id": DISCORD_CHANNEL, "api_base": discord.api_base},
        "slack": {"mode": "http", "bot_token": BOT_TOKEN, "signing_secret": SECRET,
                  "channel": APPROVALS, "api_url": slack.api_url},
    })


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    async with FakeDiscord() as discord, FakeSlack() as slack:
        work = tmp_path / "work"
        work.mkdir()
        (work / "old.txt").write_text("old")
        async with serving(settings(work, discord, slack)) as (_, http):
            yield Daemon(http, discord, slack, work)


async def test_health_shows_discord_and_its_endpoint_checks_signatures(daemon: Daemon) -> None:
    """/health lists discord as ok; PING gets PONG; a request signed by another key is 401."""
    async def ok() -> bool:
        health = (await daemon.http.get("/health")).json()
        return bool(health["surfaces"].get("discord") == "ok")

    await until(ok, "discord to be ok on /health")
    assert (await daemon.interact(daemon.discord.interaction(1))).json() == {"type": 1}
    async with FakeDiscord() as impostor:
        refused = await daemon.interact(daemon.discord.interaction(1), signed_by=impostor)
    assert refused.status_code == 401


async def test_one_approval_on_discord_and_one_on_slack_make_the_quorum(daemon: Daemon) -> None:
    """Alice approves on Discord (told 1 of 2, privately), Slack's approver completes it;
    the task runs and the Discord card shows the outcome with no buttons left."""
    r = await daemon.http.post("/tasks", json={
        "goal": "clean up", "steps": [{"tool": "delete_file", "args": {"path": "old.txt"}}]})
    task_id = r.json()["id"]
    await daemon.discord.wait_until(lambda: bool(daemon.discord.channel_messages(
        DISCORD_CHANNEL)))
    await daemon.slack.wait_for_calls("chat.postMessage")
    click = daemon.discord.click(DISCORD_CHANNEL, daemon.card().id, "Once", user_id=ALICE)
    partial = (await daemon.interact(click)).json()
    assert partial["type"] == 4 and "1 of 2" in partial["data"]["content"]
    ts = next(ts for (ch, ts) in daemon.slack.messages if ch == APPROVALS)
    message = daemon.slack.message(APPROVALS, ts)
    button = find_button(message, "signoff_once")
    assert button is not None
    payload = block_actions_payload(channel=APPROVALS, message_ts=ts, action_id="signoff_once",
                                    value=str(button["value"]), message=message)
    body, headers = signed_interaction(SECRET, payload)
    assert (await daemon.http.post("/slack/events", content=body, headers=headers)
            ).status_code == 200

    async def settled() -> bool:
        state = (await daemon.http.get(f"/tasks/{task_id}")).json()["state"]
        return state == "completed" and daemon.card().labels == ()

    await until(settled, "the task to complete and the Discord card to be edited")
    assert "Approved once" in daemon.card().text
    assert not (daemon.work / "old.txt").exists()
