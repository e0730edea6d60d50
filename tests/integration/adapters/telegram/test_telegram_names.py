"""People by name on Telegram: a tap on the real TelegramSurface (python-telegram-bot
against the fake Bot API) is shown by the sender's Telegram name on the card and the team
line, while the audit log keeps telegram:<id>."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from signoff.adapters.telegram import TelegramSurface
from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, TaskState
from signoff.wiring import build_node
from tests.fakes.telegram_api import FakeTelegramApi, user

CHAT, TEAM = "-1001234567890", "-1009876543210"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramApi]:
    """A fresh fake Bot API server."""
    async with FakeTelegramApi() as server:
        yield server


async def test_a_telegram_tap_shows_the_sender_s_name(fake: FakeTelegramApi,
                                                      tmp_path: Path) -> None:
    """User 42 (@alice) denies by a tap: the edited card and the team line say "by alice",
    the audit log says telegram:42."""
    work = tmp_path / "work"
    work.mkdir()
    section = {"bot_token": fake.token, "chat_id": CHAT, "base_url": fake.base_url}
    settings = Settings.model_validate({
        "daemon": {"work_dir": str(work)}, "telegram": section,
        "approvals": {"approvers": ["telegram:42"]},
        "notify": [{"channel": f"telegram:{TEAM}", "events": ["denied"]}]})
    platform = TelegramSurface(bot_token=fake.token, chat_id=CHAT, base_url=fake.base_url,
                                base_file_url=fake.base_file_url, timeout=5.0)
    node = build_node(settings, surfaces={"telegram": platform}, clock=FakeClock(),
                      database=f"sqlite:///{tmp_path / 'signoff.db'}")
    await node.store.open()
    runner = asyncio.create_task(platform.run(node.flow.on_decision))
    try:
        await fake.wait_call("getUpdates")
        task = await node.engine.submit("ping the hook", claim=True, steps=[Action(
            tool="send_webhook", args={"url": "http://127.0.0.1:9/hook", "payload": {}})])
        assert task is not None
        task = await node.engine.advance(task)
        assert task.state is TaskState.WAITING_APPROVAL
        await node.flow.dispatcher.run_once()
        [card] = fake.chat_messages(CHAT)
        update = fake.tap(CHAT, card.message_id, "Deny", user(42, "alice"))
        fake.push_update(update)
        await fake.wait_answer(fake.query_id(update))
        assert node.flow.notifier is not None
        await node.flow.notifier.flush(force=True)
        await node.flow.dispatcher.run_once()
        assert "Denied by alice" in fake.message(CHAT, card.message_id).text
        [line] = [m.text for m in fake.chat_messages(TEAM)]
        assert line.startswith("⛔ denied: ping the hook") and "— by alice" in line, line
        events = (await node.store.audit_events(task_id=task.id)).items
        assert [e.actor for e in events if e.kind == "decision"] == ["telegram:42"]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await node.store.close()
