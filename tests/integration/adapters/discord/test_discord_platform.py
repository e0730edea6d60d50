"""DiscordSurface against the fake Discord: signatures, PING, answers within Discord's
3 seconds, replies that ping only who is asked, and rate limits handed to the outbox."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from signoff.adapters.discord.surface import actor_of
from signoff.bot.ports import CardRef, DecisionEvent, DecisionOutcome
from signoff.errors import PlatformRejected, PlatformUnavailable, RateLimited
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import DecisionCode, Scope
from signoff.runtime.replay import MemoryReplayLedger
from signoff.testing import sample_card
from tests.fakes.discord_api import APPROVALS, TEAM, DiscordHarness, FakeDiscord, encode


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    """A fresh fake Discord."""
    async with FakeDiscord() as server:
        yield server


@pytest.fixture
async def rig(fake: FakeDiscord) -> AsyncIterator[DiscordHarness]:
    """A DiscordSurface on the fake, with a client for its interactions route."""
    async with DiscordHarness.on(fake) as harness:
        yield harness


class Decisions:
    """A decision handler that records events and answers with ``outcome``."""

    def __init__(self, outcome: DecisionOutcome | None = None) -> None:
        self.events: list[DecisionEvent] = []
        self.outcome = outcome or DecisionOutcome(True, "Approved once")
        self.release: asyncio.Event | None = None

    async def __call__(self, event: DecisionEvent) -> DecisionOutcome:
        self.events.append(event)
        if self.release is not None:
            await self.release.wait()
        return self.outcome


async def posted(rig: DiscordHarness, **changes: Any) -> CardRef:
    return await rig.surface.post_card(sample_card(**changes))


async def test_a_bad_or_missing_signature_is_401_and_decides_nothing(rig: DiscordHarness) -> None:
    """A click signed with another key, unsigned, or with a changed body is refused (401)."""
    decisions = Decisions()
    await rig.start(decisions)
    ref = await posted(rig)
    body = encode(rig.fake.click(ref.channel, ref.message_id, "Once"))
    headers = rig.fake.sign(body, int(rig.clock.now().timestamp()))
    async with FakeDiscord() as other:
        forged = other.sign(body, int(rig.clock.now().timestamp()))
    route = "/discord/interactions"
    assert (await rig.client.post(route, content=body, headers=forged)).status_code == 401
    assert (await rig.client.post(route, content=body)).status_code == 401
    tampered = body.replace(b'"4242"', b'"4243"')
    assert (await rig.client.post(route, content=tampered, headers=headers)).status_code == 401
    bad_hex = {**headers, "X-Signature-Ed25519": "zz"}
    assert (await rig.client.post(route, content=body, headers=bad_hex)).status_code == 401
    assert decisions.events == []


async def test_a_signed_request_older_than_five_minutes_is_refused(rig: DiscordHarness) -> None:
    """A captured click replayed with its old timestamp is 401."""
    decisions = Decisions()
    await rig.start(decisions)
    ref = await posted(rig)
    body = encode(rig.fake.click(ref.channel, ref.message_id, "Once"))
    headers = rig.fake.sign(body, int(rig.clock.now().timestamp()) - 301)
    response = await rig.client.post("/discord/interactions", content=body, headers=headers)
    assert response.status_code == 401 and decisions.events == []


async def test_ping_is_answered_with_pong_even_before_run(rig: DiscordHarness) -> None:
    """Discord's endpoint check (PING, type 1) gets type 1 back, whether or not approvals
    are being taken."""
    response = await rig.post(rig.fake.interaction(1))
    assert response.status_code == 200 and response.json() == {"type": 1}


async def test_the_same_interaction_twice_is_acted_on_once(fake: FakeDiscord) -> None:
    """An interaction delivered again (same id) is 401 the second time, decided once."""
    async with DiscordHarness.on(fake, replay=MemoryReplayLedger(clock=FakeClock())) as rig:
        decisions = Decisions()
        await rig.start(decisions)
        ref = await posted(rig)
        click = rig.fake.click(ref.channel, ref.message_id, "Once")
        assert (await rig.post(click)).status_code == 200
        assert (await rig.post(click)).status_code == 401
        assert len(decisions.events) == 1


async def test_an_accepted_click_is_a_deferred_update(rig: DiscordHarness) -> None:
    """An accepted decision answers type 6: the card itself shows the outcome."""
    decisions = Decisions()
    await rig.start(decisions)
    ref = await posted(rig)
    response = await rig.post(rig.fake.click(ref.channel, ref.message_id, "Session",
                                             nick="Ally", user_id="777"))
    assert response.json() == {"type": 6}
    [event] = decisions.events
    assert (event.scope, event.actor.key, event.actor.display) == (
        Scope.SESSION, "discord:777", "Ally")
    assert event.ref == ref


async def test_a_late_or_unauthorized_click_is_told_to_the_clicker_alone(
        rig: DiscordHarness) -> None:
    """A refusal is answered with an ephemeral message (flags 64) pinging nobody."""
    await rig.start(Decisions(DecisionOutcome(False, "Too late: already approved by "
                                              "<@1> @everyone", DecisionCode.ALREADY_DECIDED)))
    ref = await posted(rig)
    answer = (await rig.post(rig.fake.click(ref.channel, ref.message_id, "Once"))).json()
    assert answer["type"] == 4 and answer["data"]["flags"] == 64
    assert answer["data"]["allowed_mentions"] == {"parse": [], "users": []}
    assert "Too late" in answer["data"]["content"]
    assert "<@1>" not in answer["data"]["content"]


async def test_a_slow_decision_is_deferred_and_its_outcome_edited_in(fake: FakeDiscord) -> None:
    """Past the answer deadline the click gets "thinking" (type 5, ephemeral); the outcome
    is then written into that reply through the interaction's webhook."""
    async with DiscordHarness.on(fake, answer_within=0.01) as rig:
        decisions = Decisions(DecisionOutcome(False, "Not authorized: you are not an "
                                              "approver", DecisionCode.NOT_AUTHORIZED))
        decisions.release = asyncio.Event()
        await rig.start(decisions)
        ref = await posted(rig)
        click = rig.fake.click(ref.channel, ref.message_id, "Once")
        answer = (await rig.post(click)).json()
        assert answer == {"type": 5, "data": {"flags": 64}}
        decisions.release.set()
        await fake.wait_until(lambda: click["token"] in fake.replies)
        assert "Not authorized" in fake.replies[click["token"]]["content"]


async def test_a_click_before_run_or_on_a_foreign_button_decides_nothing(
        rig: DiscordHarness) -> None:
    """Before `run` a click is told to try again; an unknown custom_id is unknown."""
    ref = await posted(rig)
    early = (await rig.post(rig.fake.click(ref.channel, ref.message_id, "Once"))).json()
    assert early["type"] == 4 and "not being taken" in early["data"]["content"]
    decisions = Decisions()
    await rig.start(decisions)
    click = rig.fake.click(ref.channel, ref.message_id, "Once")
    click["data"]["custom_id"] = "someone-else:42"
    answer = (await rig.post(click)).json()
    assert "Unknown" in answer["data"]["content"] and decisions.events == []


async def test_a_held_card_has_only_undo_and_its_click_undoes(rig: DiscordHarness) -> None:
    """During the hold the card's one button is Undo; clicking it is an undo event."""
    decisions = Decisions()
    await rig.start(decisions)
    card = sample_card()
    ref = await rig.surface.post_card(card)
    await rig.surface.update_card(ref, replace(card, status="held", outcome="Held"))
    assert rig.fake.message(ref.channel, ref.message_id).labels == ("Undo",)
    await rig.post(rig.fake.click(ref.channel, ref.message_id, "Undo"))
    [event] = decisions.events
    assert event.undo and event.scope is Scope.DENY


async def test_a_step_up_card_links_to_the_console_instead_of_deciding(
        rig: DiscordHarness) -> None:
    """A step-up card's only button is a link to its console page."""
    ref = await posted(rig, step_up=True, confirm_url="https://signoff.example/confirm/x")
    [button] = rig.fake.message(ref.channel, ref.message_id).buttons
    assert button["style"] == 5 and button["url"] == "https://signoff.example/confirm/x"


async def test_agent_text_is_shown_as_written_and_pings_nobody(rig: DiscordHarness) -> None:
    """Markdown, @everyone and <@id> in a goal or title are shown literally; the card
    allows no mention at all."""
    ref = await posted(rig, title="**Ship** it <@123> @everyone", goal="see `x` [l](http://e)")
    message = rig.fake.message(ref.channel, ref.message_id)
    assert "**Ship** it <@123> @\u200beveryone" in message.text
    assert "see `x` [l](http://e)" in message.text
    assert message.allowed_mentions == {"parse": [], "users": []}
    assert message.pinged == []


async def test_a_reminder_is_a_reply_that_pings_only_who_is_asked(rig: DiscordHarness) -> None:
    """Under a card, a notification replies to it and pings the Discord approvers named,
    not people written into the text."""
    ref = await posted(rig)
    await rig.surface.notify(APPROVALS, "Still waiting <@555>", thread=ref,
                             mentions=("discord:4242", "slack:U1"))
    reply = rig.fake.channel_messages(APPROVALS)[-1]
    assert reply.message_reference == {"message_id": ref.message_id, "channel_id": APPROVALS,
                                       "fail_if_not_exists": False}
    assert reply.pinged == ["4242"]
    assert "slack:U1" in reply.text


async def test_an_escalated_card_pings_the_people_it_names(rig: DiscordHarness) -> None:
    """A card that mentions approvers pings exactly those Discord users."""
    ref = await posted(rig, mentions=("discord:4242", "telegram:42"))
    assert rig.fake.message(ref.channel, ref.message_id).pinged == ["4242"]


async def test_a_429_is_rate_limited_with_discords_delay(rig: DiscordHarness) -> None:
    """429 with retry_after becomes RateLimited carrying that delay, and the route is not
    called again until it has passed."""
    rig.fake.fail_next(1, status=429, retry_after=2.5)
    with pytest.raises(RateLimited) as info:
        await posted(rig)
    assert info.value.retry_after == 2.5
    calls = len(rig.fake.calls)
    with pytest.raises(RateLimited) as again:
        await posted(rig)
    assert 0 < again.value.retry_after <= 2.5 and len(rig.fake.calls) == calls
    await rig.surface.notify(TEAM, "another channel is not held back")
    rig.clock.advance(3)
    assert (await posted(rig)).message_id


async def test_the_global_limit_holds_back_every_route(rig: DiscordHarness) -> None:
    """A global 429 stops calls to every channel until its retry_after has passed."""
    rig.fake.fail_next(1, status=429, retry_after=1.0, is_global=True)
    with pytest.raises(RateLimited):
        await posted(rig)
    with pytest.raises(RateLimited):
        await rig.surface.notify(TEAM, "held back too")
    rig.clock.advance(1.5)
    await rig.surface.notify(TEAM, "now it goes")


async def test_a_500_is_retryable_and_a_refusal_is_final(rig: DiscordHarness) -> None:
    """5xx is PlatformUnavailable; an unknown channel is PlatformRejected saying so."""
    rig.fake.fail_next(1, status=502)
    with pytest.raises(PlatformUnavailable):
        await posted(rig)
    with pytest.raises(PlatformRejected, match="Unknown Channel"):
        await rig.surface.notify("discord:1999999999999999999", "nowhere")


async def test_check_proves_the_token_and_the_channel(fake: FakeDiscord) -> None:
    """A refused token or an unseen channel fails the start-up check with a clear reason."""
    async with DiscordHarness.on(fake) as rig:
        await rig.surface.check()
        assert rig.surface.bot_id == fake.application_id
    async with DiscordHarness.on(fake, bot_token="MTE.revoked") as rig:
        with pytest.raises(PlatformRejected, match="bot token was refused"):
            await rig.surface.check()
    async with DiscordHarness.on(fake, channel_id="1100000000000000077") as rig:
        with pytest.raises(PlatformRejected, match="Unknown Channel"):
            await rig.surface.check()


def test_the_name_shown_is_the_members_nick_then_global_name_then_username() -> None:
    """Who clicked is their user id; the name is nick, else global_name, else username."""
    user = {"id": "9", "username": "bob", "global_name": "Bobby"}
    assert actor_of({"member": {"user": user, "nick": "B"}}).display == "B"  # type: ignore[union-attr]
    assert actor_of({"member": {"user": user, "nick": None}}).display == "Bobby"  # type: ignore[union-attr]
    dm = actor_of({"user": {**user, "global_name": None}})
    assert dm is not None and (dm.key, dm.display) == ("discord:9", "bob")
    assert actor_of({"member": {"user": {"id": "x"}}}) is None


async def test_a_signed_body_that_is_no_interaction_is_400(rig: DiscordHarness) -> None:
    """Authentic but unreadable (not JSON, no type) is 400; a slash command gets a private
    pointer to the buttons."""
    for body in (b"not json", b"[1]", b'{"id": "1"}'):
        headers = rig.fake.sign(body, int(rig.clock.now().timestamp()))
        response = await rig.client.post("/discord/interactions", content=body,
                                         headers=headers)
        assert response.status_code == 400, body
    answer = (await rig.post(rig.fake.interaction(2, data={"name": "approve"}))).json()
    assert answer["type"] == 4 and answer["data"]["flags"] == 64
