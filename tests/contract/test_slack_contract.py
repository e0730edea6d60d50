"""The Surface contract for SlackSurface, in socket mode and in http mode.

Every call goes to a local fake Slack (tests/fakes/slack_api.py); socket-mode clicks come
through its websocket, http-mode clicks are signed POSTs to ``handle_http``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from signoff.testing import SurfaceContract
from tests.fakes.slack_api import FakeSlack, SlackHarness


class TestSlackSocketContract(SurfaceContract):
    """SlackSurface in socket mode."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[SlackHarness]:
        async with FakeSlack() as fake:
            harness = SlackHarness.socket(fake)
            yield harness
            await harness.stop()


class TestSlackHttpContract(SurfaceContract):
    """SlackSurface in http mode."""

    @pytest.fixture
    async def harness(self) -> AsyncIterator[SlackHarness]:
        async with FakeSlack() as fake:
            harness = SlackHarness.http_mode(fake)
            yield harness
            await harness.stop()
