"""A burst of approval requests to one Telegram chat goes through the durable outbox:
every card arrives, in order, exactly once, although the chat answers 429 on and off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from signoff.adapters.telegram import TelegramSurface
from signoff.bot.outbox import FOREVER
from signoff.config.settings import Settings
from signoff.runtime.models import Action
from signoff.wiring import build_node
from tests.fakes.telegram_api import FakeTelegramApi

CHAT = "-1009876543210"


@pytest.mark.slow
async def test_a_burst_of_100_cards_arrives_complete_in_order_and_once(tmp_path: Path) -> None:
    """100 requests, a per-chat limit of 20 per second: the outbox retries after
    retry_after until all 100 cards are delivered in request order, none twice."""
    async with FakeTelegramApi() as fake:
        fake.set_rate_limit(20, window=1.0, retry_after=0.2)
        # Our own limiter off: the fake's 429s are what the outbox must cope with.
        platform = TelegramSurface(bot_token=fake.token, chat_id=CHAT, mode="polling",
                                    base_url=fake.base_url, base_file_url=fake.base_file_url,
                                    max_per_second=0, max_per_minute_per_group=0)
        work = tmp_path / "work"
        settings = Settings.model_validate({"daemon": {"work_dir": str(work)}})
        node = build_node(settings, surfaces={"telegram": platform},
                          database=f"sqlite:///{tmp_path / 'burst.db'}")
        await node.store.open()
        requested = []
        for n in range(100):
            task = await node.engine.submit(f"burst {n}", claim=True, steps=[
                Action(tool="send_webhook", args={"url": f"http://127.0.0.1:9/{n}",
                                                  "payload": {}})])
            assert task is not None
            task = await node.engine.advance(task)
            assert task.approval is not None
            requested.append(task.approval.id)
        async with asyncio.timeout(60):
            while True:
                await node.flow.dispatcher.run_once()
                if not await node.store.due_outbox(FOREVER):
                    break
                await asyncio.sleep(0.05)  # retry_after is 0.2 s: let it pass
        delivered = [m.buttons[0][1].split(":")[1] for m in fake.chat_messages(CHAT)]
        assert delivered == requested, "every card once, in request order"
        assert fake.rate_limited > 0, "the chat really pushed back"
        assert not fake.violations, "no callback_data over 64 bytes"
        await platform.aclose()
        await node.store.close()
