"""TelegramSurface passes the Surface contract, in polling and in webhook mode.

Taps are real-format callback_query updates: fed through the fake Bot API's getUpdates
long poll (polling), or POSTed with the secret header to a Starlette app that mounts
`TelegramSurface.handle_webhook` (webhook). Rendering is read back from the fake server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from signoff.adapters.telegram import TelegramSurface
from signoff.bot.ports import ApprovalCard, CardRef, DecisionHandler
from signoff.runtime.models import Scope
from signoff.testing import BUTTON_LABELS, Rendered, SurfaceContract, cancel_and_wait
from tests.fakes.telegram_api import FakeTelegramApi, user

CHAT = "-1001234567890"
TEAM = "-1009876543210"
SECRET = "contract-secret_42"
WEBHOOK_URL = "https://signoff.example.com/telegram/webhook"


@dataclass
class TelegramHarness:
    """`SurfaceHarness` for TelegramSurface against `FakeTelegramApi`."""

    fake: FakeTelegramApi
    surface: TelegramSurface
    user_id: str = "42"
    notify_channel: str = TEAM
    client: httpx.AsyncClient | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface; return once it takes updates (first getUpdates or setWebhook)."""
        self._task = asyncio.create_task(self.surface.run(on_decision))
        ready = "getUpdates" if self.surface.mode == "polling" else "setWebhook"
        waiting = asyncio.create_task(self.fake.wait_call(ready))
        await asyncio.wait({self._task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():  # run() failed while starting: show why
            waiting.cancel()
            self._task.result()
        await waiting

    async def stop(self) -> None:
        """Cancel run() and wait for its clean shutdown."""
        await cancel_and_wait(self._task)
        self._task = None

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Tap the button as the person would; return once the tap was answered."""
        update = self.fake.tap(ref.channel, ref.message_id, BUTTON_LABELS[scope],
                               user(int(user_id), "alice"))
        query_id = self.fake.query_id(update)
        if self.client is None:
            self.fake.push_update(update)
        else:
            response = await self.client.post(
                "/telegram/webhook", json=update,
                headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
            assert response.status_code == 200
        await self.fake.wait_answer(query_id)

    async def rendered(self, ref: CardRef) -> Rendered:
        """Text and buttons of the message as the fake server holds it."""
        message = self.fake.message(ref.channel, ref.message_id)
        return Rendered(text=message.text, buttons=message.labels)

    async def feedback(self) -> list[str]:
        """Toasts sent with answerCallbackQuery."""
        return [text or "" for text in self.fake.answers.values()]

    async def notifications(self, channel: str) -> list[str]:
        """Texts the bot sent to ``channel``."""
        return [m.text for m in self.fake.chat_messages(channel)]


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramApi]:
    """A fresh fake Bot API server."""
    async with FakeTelegramApi() as server:
        yield server


class TestTelegramPollingContract(SurfaceContract):
    """The contract over getUpdates long polling."""

    @pytest.fixture
    async def harness(self, fake: FakeTelegramApi) -> AsyncIterator[TelegramHarness]:
        surface = TelegramSurface(bot_token=fake.token, chat_id=CHAT, mode="polling",
                                  base_url=fake.base_url, base_file_url=fake.base_file_url,
                                  timeout=5.0)
        harness = TelegramHarness(fake=fake, surface=surface)
        yield harness
        await harness.stop()
        await surface.aclose()
        assert fake.violations == []


class TestTelegramWebhookContract(SurfaceContract):
    """The contract over webhook POSTs to the daemon's /telegram/webhook."""

    @pytest.fixture
    async def harness(self, fake: FakeTelegramApi) -> AsyncIterator[TelegramHarness]:
        surface = TelegramSurface(bot_token=fake.token, chat_id=CHAT, mode="webhook",
                                  base_url=fake.base_url, base_file_url=fake.base_file_url,
                                  webhook_secret=SECRET, webhook_url=WEBHOOK_URL, timeout=5.0)
        app = Starlette(routes=[Route("/telegram/webhook", surface.handle_webhook,
                                      methods=["POST"])])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://daemon") as client:
            harness = TelegramHarness(fake=fake, surface=surface, client=client)
            yield harness
            await harness.stop()
        await surface.aclose()
        assert fake.violations == []
