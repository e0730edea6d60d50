"""DiscordSurface passes the Surface contract.

Every REST call goes to a local fake Discord (tests/fakes/discord_api.py); clicks are
MESSAGE_COMPONENT interactions signed with the fake application's Ed25519 key, POSTed to
the surface's own ``/discord/interactions`` route served in-process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from signoff.testing import SurfaceContract
from tests.fakes.discord_api import DiscordHarness, FakeDiscord


@pytest.fixture
async def discord_harness() -> AsyncIterator[DiscordHarness]:
    """A fake Discord, a DiscordSurface on it and a client for its interactions route."""
    async with FakeDiscord() as fake, DiscordHarness.on(fake) as harness:
        yield harness


class TestDiscordContract(SurfaceContract):
    """The contract over Discord's REST API and HTTP interactions."""

    @pytest.fixture
    async def harness(self, discord_harness: DiscordHarness) -> DiscordHarness:
        return discord_harness
