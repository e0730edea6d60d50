"""Every surface is a plug-in: the four built-in ones and ``echo``, a surface from another
package (tests/plugins/signoff_echo_surface), pass the plug-in contract; echo also passes
the surface contract, clicked through its own HTTP routes."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from signoff.bot.ports import (
    ApprovalCard,
    CardRef,
    DecisionHandler,
    ShowsCards,
    SurfacePlugin,
)
from signoff.bot.routing.authorizer import TRUSTED_SURFACES
from signoff.runtime.models import Scope
from signoff.testing import (
    BUTTON_LABELS,
    PluginContract,
    Rendered,
    SurfaceContract,
    cancel_and_wait,
    route_client,
    surface_deps,
)
from tests.plugins.install import ECHO, install_plugin

TOKEN = "echo-t0ken"
BUILT_IN: dict[str, dict[str, Any] | None] = {
    "slack": {"bot_token": "xoxb-1", "app_token": "xapp-1", "channel": "C1"},
    "telegram": {"bot_token": "1:A", "chat_id": -100123},
    "web": None,
    "terminal": None,
    "email": {"to": ["alice@example.com"], "public_url": "https://signoff.example.com"},
    "discord": {"application_id": "1100000000000000999", "public_key": "ab" * 32,
                "bot_token": "MTE.fake", "channel_id": 1100000000000000001},
    "teams": {"app_id": "00000000-0000-0000-0000-0000000000b0", "app_password": "secret",
              "tenant_id": "00000000-0000-0000-0000-0000000000t0",
              "conversation_id": "19:approvals@thread.tacv2"},
    "webpush": {"enabled": True},
    "ntfy": {"topic": "alice-approvals", "token": "tk_1"},
}


@pytest.fixture
def echo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The echo package installed into a fresh directory on sys.path."""
    monkeypatch.syspath_prepend(str(install_plugin(ECHO, tmp_path / "site")))
    return importlib.import_module("signoff_echo_surface")


class TestBuiltInPlugins(PluginContract):
    """slack, telegram, web and terminal are registered like any other package's surface."""

    @pytest.fixture(params=sorted(BUILT_IN))
    def name(self, request: pytest.FixtureRequest) -> str:
        """One built-in surface."""
        return str(request.param)

    @pytest.fixture
    def plugin(self, name: str) -> SurfacePlugin[Any]:
        """Its plug-in, from its adapter package."""
        return importlib.import_module(f"signoff.adapters.{name}").PLUGIN  # type: ignore[no-any-return]

    @pytest.fixture
    def section(self, name: str) -> dict[str, Any] | None:
        """A valid section for it."""
        return BUILT_IN[name]


@pytest.mark.parametrize("name", sorted(set(BUILT_IN) - TRUSTED_SURFACES))
async def test_every_built_in_chat_surface_says_on_which_cards_it_approves(
        name: str, tmp_path: Path) -> None:
    """A built-in surface people answer outside the console shows cards with a length
    limit, so it says on which it offers Once (`ShowsCards`); without it the flow took
    every card it posted as shown whole, and approved what a cut card hid (Discord)."""
    plugin: SurfacePlugin[Any] = importlib.import_module(f"signoff.adapters.{name}").PLUGIN
    section = BUILT_IN[name]
    loaded = plugin.settings.model_validate(section) if plugin.settings else None
    surface = plugin.build(loaded, surface_deps(state_dir=tmp_path))
    assert isinstance(surface, ShowsCards), name


class TestEchoPlugin(PluginContract):
    """A surface from another package is registered through its own pyproject."""

    @pytest.fixture
    def plugin(self, echo: ModuleType) -> SurfacePlugin[Any]:
        """echo's plug-in."""
        return echo.PLUGIN  # type: ignore[no-any-return]

    @pytest.fixture
    def section(self) -> dict[str, Any]:
        """A valid [echo] section."""
        return {"channel": "approvals", "token": TOKEN}


@dataclass
class EchoHarness:
    """`SurfaceHarness` for echo, driven through its own routes like its users would."""

    surface: Any
    client: httpx.AsyncClient
    user_id: str = "bob"
    notify_channel: str = "team"
    told: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface in the background."""
        self._task = asyncio.create_task(self.surface.run(on_decision))
        await asyncio.sleep(0)

    async def stop(self) -> None:
        """Cancel its run."""
        await cancel_and_wait(self._task)

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """POST /echo/decide, as its users do."""
        answer = await self.client.post("/echo/decide", headers={"X-Echo-Token": TOKEN}, json={
            "message_id": ref.message_id, "scope": scope.value, "user": user_id})
        assert answer.status_code == 200, answer.text
        self.told.append(answer.json()["message"])

    async def rendered(self, ref: CardRef) -> Rendered:
        """The card as GET /echo/cards shows it."""
        cards = (await self.client.get("/echo/cards", headers={"X-Echo-Token": TOKEN})).json()
        [card] = [c for c in cards if c["message_id"] == ref.message_id]
        text = " | ".join(filter(None, [card["title"], card["why"], card["outcome"]]))
        return Rendered(text=text, buttons=tuple(BUTTON_LABELS[Scope(b)] for b in card["buttons"]))

    async def feedback(self) -> list[str]:
        """What /echo/decide answered."""
        return list(self.told)

    async def notifications(self, channel: str) -> list[str]:
        """GET /echo/notes for one channel."""
        notes = (await self.client.get("/echo/notes", headers={"X-Echo-Token": TOKEN})).json()
        return [n["text"] for n in notes if n["channel"] == channel]


class TestEchoContract(SurfaceContract):
    """echo behaves like every other surface."""

    @pytest.fixture
    async def harness(self, echo: ModuleType) -> AsyncIterator[EchoHarness]:
        """echo built by its plug-in, its routes served in-process."""
        section = echo.EchoSettings(channel="approvals", token=TOKEN)
        surface = echo.PLUGIN.build(section, surface_deps())
        async with route_client(surface) as client:
            yield EchoHarness(surface=surface, client=client)


async def test_echo_routes_refuse_a_caller_without_its_token(echo: ModuleType) -> None:
    """The daemon serves a surface's routes without the API key: echo checks its own."""
    surface = echo.PLUGIN.build(echo.EchoSettings(channel="a", token=TOKEN), surface_deps())
    async with route_client(surface) as client:
        assert (await client.get("/echo/cards")).status_code == 401
        assert (await client.get("/echo/cards", headers={"X-Echo-Token": "nope"})).status_code == 401
