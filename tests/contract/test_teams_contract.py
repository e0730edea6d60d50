"""TeamsSurface passes the surface contract against the fake Teams (tests/fakes/teams_api.py).

Clicks are ``adaptiveCard/action`` invoke activities built from the posted card's own
Action.Execute button, signed with the fake's RSA key exactly as Bot Framework signs them,
and POSTed to the surface's own ``/teams/messages`` route; rendering is read back from
the activities the fake connector holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from signoff.adapters.teams import TeamsSurface
from signoff.adapters.teams.cards import rendered_text
from signoff.bot.ports import ApprovalCard, CardRef, DecisionHandler
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Scope
from signoff.testing import BUTTON_LABELS, Rendered, SurfaceContract, cancel_and_wait, route_client
from tests.fakes.teams_api import FakeTeams

ALICE = "00000000-0000-0000-0000-0000000000a1"
NOW = datetime(2026, 3, 14, 9, 27, tzinfo=UTC)


def teams_platform(fake: FakeTeams, clock: FakeClock, **extra: Any) -> TeamsSurface:
    """A TeamsSurface pointed at ``fake``."""
    return TeamsSurface(app_id=fake.app_id, app_password=fake.app_password,
                         conversation_id=fake.conversation_id, service_url=fake.service_url,
                         openid_metadata_url=fake.openid_metadata_url,
                         token_url=fake.token_url, tenant_id=fake.tenant_id, clock=clock,
                         timeout=5.0, **extra)


@dataclass
class TeamsHarness:
    """`SurfaceHarness` for TeamsSurface against `FakeTeams`."""

    fake: FakeTeams
    surface: TeamsSurface
    clock: FakeClock
    client: httpx.AsyncClient
    user_id: str = ALICE
    notify_channel: str = ""
    answers: list[dict[str, Any]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.notify_channel = f"teams:{self.fake.conversation_id}"

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface in the background."""
        self._task = asyncio.create_task(self.surface.run(on_decision))
        await asyncio.sleep(0)

    async def stop(self) -> None:
        """Cancel run()."""
        await cancel_and_wait(self._task)
        self._task = None

    async def post(self, activity: dict[str, Any], token: str | None = None) -> httpx.Response:
        """POST an activity to /teams/messages with its Bot Framework JWT."""
        token = token or self.fake.sign(activity, now=self.clock.now())
        return await self.client.post("/teams/messages", json=activity,
                                      headers={"Authorization": f"Bearer {token}"})

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Press the button as Teams would send it; keep the invoke response."""
        response = await self.post(self.fake.click(ref.message_id, BUTTON_LABELS[scope],
                                                   aad=user_id))
        assert response.status_code == 200, response.text
        self.answers.append(response.json())

    async def rendered(self, ref: CardRef) -> Rendered:
        """The card as the fake connector holds it."""
        activity = self.fake.activity(ref.message_id)
        return Rendered(text=activity.text, buttons=activity.labels)

    async def feedback(self) -> list[str]:
        """What the clickers were shown: the invoke responses' cards or messages."""
        return [rendered_text(a["value"]) if isinstance(a["value"], dict) else a["value"]
                for a in self.answers]

    async def notifications(self, channel: str) -> list[str]:
        """Texts posted to the conversation."""
        return [a.text for a in self.fake.replies(channel.removeprefix("teams:"))]


@pytest.fixture
async def teams() -> AsyncIterator[TeamsHarness]:
    """A harness on a fresh fake Teams, at a fixed moment."""
    clock = FakeClock(NOW)
    async with FakeTeams() as fake:
        surface = teams_platform(fake, clock)
        async with route_client(surface) as client:
            harness = TeamsHarness(fake=fake, surface=surface, clock=clock, client=client)
            yield harness
            await harness.stop()
        await surface.aclose()
        assert fake.violations == []


class TestTeamsContract(SurfaceContract):
    """The contract over signed invoke activities to /teams/messages."""

    @pytest.fixture
    async def harness(self, teams: TeamsHarness) -> TeamsHarness:
        """The Teams harness."""
        return teams
