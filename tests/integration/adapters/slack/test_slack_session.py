"""SlackSurface keeps one HTTP session while it runs: its Web API calls share a
connection, a failed call does not end it, and it is closed when `run` ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from signoff.adapters.slack import SlackSurface
from signoff.bot.ports import DecisionEvent, DecisionOutcome
from signoff.errors import PlatformUnavailable
from signoff.testing import sample_card
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack, SlackHarness


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


async def nobody(event: DecisionEvent) -> DecisionOutcome:
    return DecisionOutcome(True, "ok")


async def running(fake: FakeSlack, **options: float) -> SlackHarness:
    harness = SlackHarness.http_mode(fake, **options)
    await harness.start(nobody)
    return harness


def peers(fake: FakeSlack) -> list[tuple[str, int] | None]:
    return [call.peer for call in fake.calls_to("chat.postMessage")]


async def test_calls_while_running_share_one_connection(fake: FakeSlack) -> None:
    """Posts, an edit and a notice made while `run` runs all come on one connection."""
    harness = await running(fake)
    try:
        refs = [await harness.surface.post_card(sample_card()) for _ in range(3)]
        await harness.surface.update_card(refs[0], sample_card())
        await harness.surface.notify("C0TEAM", "hello")
        assert len({call.peer for call in fake.calls}) == 1
        assert fake.open_connections == 1
    finally:
        await harness.stop()


async def test_a_slack_error_or_timeout_does_not_end_the_session(fake: FakeSlack) -> None:
    """After a 503 and a call that timed out, the next post still goes out, with the
    platform's timeout still applied to a call on the kept session."""
    harness = await running(fake, timeout=0.3)
    try:
        fake.fail_next("chat.postMessage", status=503)
        with pytest.raises(PlatformUnavailable):
            await harness.surface.post_card(sample_card())
        fake.stall_next("chat.postMessage")
        with pytest.raises(PlatformUnavailable):
            async with asyncio.timeout(5):  # the platform's 0.3 s must end it, not this
                await harness.surface.post_card(sample_card())
        ref = await harness.surface.post_card(sample_card())
        assert fake.message(ref.channel, ref.message_id)["ts"] == ref.message_id
    finally:
        fake.release()
        await harness.stop()


async def test_the_session_is_closed_when_run_ends(fake: FakeSlack) -> None:
    """Stopping the platform closes its connection; a post afterwards still works (on a
    session of its own, closed after it)."""
    harness = await running(fake)
    await harness.surface.post_card(sample_card())
    assert fake.open_connections == 1
    await harness.stop()
    async with asyncio.timeout(5):
        while fake.open_connections:
            await asyncio.sleep(0.01)
    await harness.surface.post_card(sample_card())
    assert len(fake.calls_to("chat.postMessage")) == 2


async def test_a_call_before_run_opens_no_lasting_connection(fake: FakeSlack) -> None:
    """Without `run` (a one-off use) each call brings and closes its own session."""
    platform = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                             signing_secret=SECRET, api_url=fake.api_url)
    await platform.post_card(sample_card())
    await platform.post_card(sample_card())
    assert len(set(peers(fake))) == 2
