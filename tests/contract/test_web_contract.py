"""WebSurface passes the Surface contract, clicked through real console form posts.

The harness signs a browser-like client in with ``GET /?key=``, reads each card from the
console (``/console/cards/{approval_id}``) and clicks by posting the card's own form,
CSRF token included; what the clicker is told is read back from the page it lands on.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from signoff.adapters.web import WebSurface
from signoff.api.app import create_app
from signoff.bot.ports import ApprovalCard, CardRef, DecisionHandler
from signoff.runtime.models import Scope
from signoff.runtime.store.memory import MemTaskStore
from signoff.testing import BUTTON_LABELS, Rendered, SurfaceContract, cancel_and_wait
from signoff.wiring import api_context, build_node
from tests.api.helpers import BASE, KEY, make_settings


def _text(fragment: str) -> str:
    """Visible text of an HTML fragment, one space between pieces."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


@dataclass
class WebHarness:
    """`SurfaceHarness` for the web console, driven over HTTP like a browser."""

    surface: WebSurface
    client: httpx.AsyncClient
    user_id: str = "admin"  # the admin key acts as web:admin
    notify_channel: str = "console"
    _task: asyncio.Task[None] | None = None
    _seen: list[str] = field(default_factory=list)

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface (its `run` keeps the handler) in the background."""
        self._task = asyncio.create_task(self.surface.run(on_decision))
        await asyncio.sleep(0)

    async def stop(self) -> None:
        """Cancel `run`."""
        await cancel_and_wait(self._task)
        self._task = None

    async def card_html(self, ref: CardRef) -> str:
        response = await self.client.get(f"/console/cards/{ref.message_id}")
        assert response.status_code == 200, response.status_code
        return response.text

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Press the button on the card's own form, like a browser, and follow the redirect."""
        assert user_id == self.user_id, "the console acts as the key's holder"
        page = await self.card_html(ref)
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page))
        label = BUTTON_LABELS[scope]
        assert f'value="{scope.value}"' in page and f">{label}</button>" in page
        response = await self.client.post("/console/decide",
                                          data={**fields, "scope": scope.value},
                                          headers={"origin": BASE})
        assert response.status_code == 303
        landed = await self.client.get(response.headers["location"])
        self._seen += [_text(m) for m in re.findall(r'<p class="flash[^"]*"[^>]*>(.*?)</p>',
                                                     landed.text)]

    async def rendered(self, ref: CardRef) -> Rendered:
        """Text and buttons of the card as the console shows it."""
        page = await self.card_html(ref)
        buttons = tuple(_text(b) for b in re.findall(r"<button[^>]*>(.*?)</button>", page))
        return Rendered(text=_text(page), buttons=buttons)

    async def feedback(self) -> list[str]:
        """Notices shown to the clicker after the redirect."""
        return list(self._seen)

    async def notifications(self, channel: str) -> list[str]:
        """Notes kept by the console for ``channel``."""
        return [text for ch, text, _ in self.surface.notes if ch == channel]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[WebHarness]:
    settings = make_settings(tmp_path)
    web = WebSurface()
    node = build_node(settings, work_dir=tmp_path, store=MemTaskStore(), surfaces={"web": web})
    ctx = api_context(settings, store=node.store, engine=node.engine,
                                   decider=node.decider, flow=node.flow, clock=node.clock,
                                   wake=node.worker.wake, web=web)
    transport = httpx.ASGITransport(app=create_app(ctx))
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        signed_in = await client.get("/", params={"key": KEY})
        assert signed_in.status_code == 303
        yield WebHarness(surface=web, client=client)


class TestWebContract(SurfaceContract):
    """The shared Surface contract, on the web console."""

    async def test_notes_show_on_the_console(self, harness: WebHarness) -> None:
        """Notes sent to the console appear on its page."""
        await harness.surface.notify("console", "Task t9 <completed>")
        page = await harness.client.get("/")
        assert "Task t9 &lt;completed&gt;" in page.text
