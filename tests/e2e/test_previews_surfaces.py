"""Previews and masking through the whole daemon, with Slack and Telegram at local fakes:
a write_file card shows its diff, a run_command card the whole command and cwd, and a
URL's token never reaches a card or a team channel, while the action uses the real URL."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.config.settings import Settings
from signoff.runtime.daemon import Daemon
from signoff.runtime.text import MASK
from signoff.wiring.daemon import assemble
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack, message_text
from tests.fakes.telegram_api import FakeMessage, FakeTelegramApi

CHAT = "-1001234567890"
TEAM = "C0TEAM"
TOKEN = "tok-9f8e7d6c"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Surfaces:
    """The daemon's API and the two fakes."""

    def __init__(self, http: httpx.AsyncClient, slack: FakeSlack, telegram: FakeTelegramApi,
                 work: Path) -> None:
        self.http, self.slack, self.telegram, self.work = http, slack, telegram, work

    async def ask(self, step: dict[str, Any]) -> tuple[str, FakeMessage]:
        """Submit one step; wait for its cards; return the Slack card text and the
        Telegram card."""
        posted = len(self.slack.calls_to("chat.postMessage"))
        sent = len(self.telegram.calls_to("sendMessage"))
        r = await self.http.post("/tasks", json={"goal": "preview", "steps": [step]})
        assert r.status_code == 202, r.text
        await self.slack.wait_for_calls("chat.postMessage", posted + 1)
        await self.telegram.wait_call("sendMessage", sent + 1)
        ts = next(ts for (ch, ts) in reversed(list(self.slack.messages)) if ch == APPROVALS)
        return message_text(self.slack.message(APPROVALS, ts)), \
            self.telegram.chat_messages(CHAT)[-1]


@pytest.fixture
async def surfaces(tmp_path: Path) -> AsyncIterator[Surfaces]:
    """A daemon on Slack (http mode) and Telegram (polling) fakes that asks for DRAFT too,
    with a team channel that hears of every request."""
    async with FakeSlack() as slack, FakeTelegramApi() as telegram:
        work = tmp_path / "work"
        (work / "src").mkdir(parents=True)
        (work / "notes.txt").write_text("alpha\nbeta <b>\ngamma\n")
        settings = Settings.model_validate({
            "daemon": {"work_dir": str(work)},
            "approvals": {"approvers": ["slack:U0ALICE", "telegram:42"],
                          "autonomous_risks": ["READ"]},
            "slack": {"mode": "http", "bot_token": BOT_TOKEN, "signing_secret": SECRET,
                      "channel": APPROVALS, "api_url": slack.api_url},
            "telegram": {"mode": "polling", "bot_token": telegram.token, "chat_id": CHAT,
                         "base_url": telegram.base_url, "base_file_url": telegram.base_file_url},
            "notify": [{"channel": f"slack:{TEAM}", "events": ["waiting_approval"]}],
        })
        port = free_port()
        node, services = await assemble(settings, host="127.0.0.1", port=port, work_dir=None,
                                        database=None, autonomous_risks=None)
        daemon = Daemon(engine=node.engine, worker=node.worker, decider=node.decider,
                        services=services)
        run = asyncio.create_task(daemon.run())
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10)
        async with asyncio.timeout(10):
            while True:
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.02)
        await telegram.wait_call("getUpdates")
        yield Surfaces(http, slack, telegram, work)
        await http.aclose()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_write_file_cards_show_the_diff_on_slack_and_telegram(surfaces: Surfaces) -> None:
    """The diff against the file on disk, in a Slack code block and a Telegram <pre>, with
    the file's own "<b>" shown as text, never as markup."""
    slack_text, tg = await surfaces.ask({"tool": "write_file", "args": {
        "path": "notes.txt", "content": "alpha\nBETA <b>\ngamma\n"}})
    for text in (slack_text, tg.text):
        assert "Changes to notes.txt" in text
        assert "--- a/notes.txt" in text and "+++ b/notes.txt" in text
        assert "-beta <b>" in text and "+BETA <b>" in text and " alpha" in text
    blocks = surfaces.slack.calls_to("chat.postMessage")[-1].body["blocks"]
    assert any("```" in str(b.get("text", {}).get("text", "")) and "+BETA" in str(b)
               for b in blocks)
    assert tg.html is not None and "<pre>" in tg.html and "+BETA &lt;b&gt;" in tg.html

    _, new = await surfaces.ask({"tool": "write_file", "args": {
        "path": "src/new.py", "content": "print('hi')\n"}})
    assert "New file src/new.py" in new.text and "+print('hi')" in new.text


async def test_run_command_cards_show_the_whole_command_and_cwd(surfaces: Surfaces) -> None:
    """A command longer than any title is on both cards in full, with where it runs."""
    command = ("git log --format='%H %an %s' --since=2026-01-01 --author=someone "
               + " ".join(f"path/{n}.py" for n in range(12)))
    slack_text, tg = await surfaces.ask({"tool": "run_command",
                                         "args": {"command": command, "cwd": "src"}})
    for text in (slack_text, tg.text):
        assert f"$ {command}" in text and "(in src)" in text


async def test_urls_are_masked_on_cards_and_in_team_notices(surfaces: Surfaces) -> None:
    """A webhook URL's token is ••• on Slack, Telegram and in the team channel line."""
    url = f"https://hooks.example.com/deploy?token={TOKEN}&env=prod"
    slack_text, tg = await surfaces.ask({"tool": "send_webhook",
                                         "args": {"url": url, "payload": {"go": True}}})
    shown = f"https://hooks.example.com/deploy?token={MASK}&env={MASK}"
    for text in (slack_text, tg.text):
        assert shown in text and TOKEN not in text
    async with asyncio.timeout(10):
        while not surfaces.slack.posted_texts(TEAM):
            await asyncio.sleep(0.05)
    team = " ".join(surfaces.slack.posted_texts(TEAM))
    assert "hooks.example.com/deploy?token=" in team and TOKEN not in team
    every_call = str([c.body for c in surfaces.slack.calls_to("chat.postMessage")])
    every_call += str([c.params for c in surfaces.telegram.calls_to("sendMessage")])
    assert TOKEN not in every_call
