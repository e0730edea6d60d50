"""Start-up of the chat surfaces against the fake Slack and Telegram: a failing check is
retried with backoff (a 429 as long as asked) while the rest runs, and cards wait for the
surface; only a refused token disables it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from signoff.adapters.slack import SlackSurface
from signoff.adapters.telegram import TelegramSurface
from signoff.bot.surfaces import Surfaces
from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, TaskState
from signoff.wiring import Node, build_node
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack
from tests.fakes.telegram_api import FakeTelegramApi

CHAT = "-1001234567890"


@dataclass
class Sleeps:
    """An injected sleep: records how long each retry waits and returns at once."""

    asked: dict[str, list[float]] = field(default_factory=dict)

    async def __call__(self, seconds: float) -> None:
        task = asyncio.current_task()
        name = task.get_name() if task else "?"
        self.asked.setdefault(name, []).append(seconds)
        await asyncio.sleep(0)


@dataclass
class Rig:
    """A node with Slack (http mode) and Telegram (polling) on fakes, and its Surfaces."""

    node: Node
    slack: FakeSlack
    telegram: FakeTelegramApi
    surfaces: Surfaces
    sleeps: Sleeps
    running: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        """Run every surface's service, each as a task named after its surface."""
        for name in list(self.node.surfaces):
            service = self.surfaces.service(name, self.node.flow.on_decision)
            self.running.append(asyncio.create_task(service(), name=name))

    async def until(self, check: Any, timeout: float = 10.0) -> None:
        """Wait until ``check()`` holds, delivering the outbox meanwhile."""
        async with asyncio.timeout(timeout):
            while not check():
                await self.node.flow.dispatcher.run_once()
                await asyncio.sleep(0.01)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """Both fakes and a node; the surfaces are checked by the test, not here."""
    async with FakeSlack() as slack_api, FakeTelegramApi() as telegram_api:
        work = tmp_path / "work"
        work.mkdir()
        (work / "old.txt").write_text("old")
        slack = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                              signing_secret=SECRET, api_url=slack_api.api_url)
        telegram = TelegramSurface(bot_token=telegram_api.token, chat_id=CHAT,
                                    base_url=telegram_api.base_url,
                                    base_file_url=telegram_api.base_file_url, timeout=5.0)
        settings = Settings.model_validate({"daemon": {"work_dir": str(work)},
                                            "approvals": {"approvers": ["slack:U0ALICE"]}})
        clock = FakeClock()
        node = build_node(settings, surfaces={"slack": slack, "telegram": telegram},
                          clock=clock, database=f"sqlite:///{tmp_path / 'signoff.db'}")
        await node.store.open()
        sleeps = Sleeps()
        surfaces = Surfaces(surfaces=node.surfaces, dispatcher=node.flow.dispatcher,
                            clock=clock, sleep=sleeps)
        rig = Rig(node, slack_api, telegram_api, surfaces, sleeps)
        yield rig
        for task in rig.running:
            task.cancel()
        await asyncio.gather(*rig.running, return_exceptions=True)
        await telegram.aclose()
        await node.store.close()


async def gated(node: Node) -> None:
    """A task that waits for approval; its card jobs are queued for every surface."""
    task = await node.engine.submit("clean up", claim=True, steps=[
        Action(tool="delete_file", args={"path": "old.txt"})])
    assert task is not None
    assert (await node.engine.advance(task)).state is TaskState.WAITING_APPROVAL


async def test_a_failed_start_up_check_is_retried_and_cards_wait_for_the_surface(
        rig: Rig) -> None:
    """Slack's auth.test answers 500 twice: Slack is degraded, Telegram gets the card at
    once, Slack's waits in the outbox; the check is retried with growing waits and, once it
    passes, Slack runs and its card is posted."""
    rig.slack.fail_next("auth.test", 2, status=500)
    await rig.surfaces.check_all()
    health = rig.surfaces.health()
    assert health["slack"].startswith("degraded: slack auth.test: http_500")
    assert health["telegram"] == "ok"
    await gated(rig.node)
    await rig.until(lambda: bool(rig.telegram.chat_messages(CHAT)))
    assert rig.slack.calls_to("chat.postMessage") == []  # held, not tried and failed
    rig.start()
    await rig.until(lambda: bool(rig.slack.calls_to("chat.postMessage")))
    assert rig.surfaces.health() == {"slack": "ok", "telegram": "ok"}
    assert rig.sleeps.asked["slack"] == [0.2, 0.4]  # backoff between the checks
    assert len(rig.slack.calls_to("auth.test")) >= 3


async def test_a_rate_limited_check_waits_as_long_as_the_platform_asks(rig: Rig) -> None:
    """429 with Retry-After 7 (Slack) and retry_after 9 (Telegram): each check is retried
    after exactly that long."""
    rig.slack.rate_limit_next("auth.test", retry_after=7)
    rig.telegram.fail_next(1, status=429, method="getMe", retry_after=9)
    await rig.surfaces.check_all()
    assert all(s.startswith("degraded:") for s in rig.surfaces.health().values())
    rig.start()
    await rig.until(lambda: rig.surfaces.health() == {"slack": "ok", "telegram": "ok"})
    assert rig.sleeps.asked["slack"] == [7.0]
    assert rig.sleeps.asked["telegram"] == [9.0]


async def test_a_refused_token_disables_the_surface_loudly_and_drops_its_jobs(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """Telegram answers 401: disabled with the reason (logged as an error, shown in the
    health), left out of the fan-out; Slack goes on."""
    caplog.set_level(logging.ERROR, logger="signoff.bot.surfaces")
    rig.telegram.token = "another-token"  # every call with ours now gets 401
    await rig.surfaces.check_all()
    health = rig.surfaces.health()
    assert health["slack"] == "ok"
    assert health["telegram"].startswith("disabled: telegram: the bot token was rejected")
    assert "surface_disabled surface=telegram" in caplog.text
    assert set(rig.node.surfaces) == {"slack"}
    await gated(rig.node)
    await rig.until(lambda: bool(rig.slack.calls_to("chat.postMessage")))
    assert rig.telegram.calls_to("sendMessage") == []


async def test_a_failing_run_degrades_the_surface_until_its_check_passes(rig: Rig) -> None:
    """Telegram's run fails (deleteWebhook 500 as polling starts): degraded, checked
    again, running again."""
    await rig.surfaces.check_all()
    rig.telegram.fail_next(1, status=500, method="deleteWebhook")  # start_polling's first call
    rig.start()
    await rig.until(lambda: bool(rig.sleeps.asked.get("telegram")))
    await rig.until(lambda: len(rig.telegram.calls_to("getUpdates")) > 0)
    assert rig.surfaces.health()["telegram"] == "ok"
