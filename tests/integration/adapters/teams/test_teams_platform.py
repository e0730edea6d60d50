"""TeamsSurface against the fake Teams: who may send activities (the Bot Framework JWT),
the bot's token, the connector's failures, replies with mentions and the card's states."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from signoff.adapters.teams.cards import REFRESH_VERB
from signoff.bot.ports import CardRef, DecisionEvent, DecisionOutcome
from signoff.errors import PlatformRejected, PlatformUnavailable, RateLimited
from signoff.runtime.clock import FakeClock
from signoff.runtime.replay import MemoryReplayLedger
from signoff.testing import route_client, sample_card
from tests.contract.test_teams_contract import ALICE, NOW, TeamsHarness, teams_platform
from tests.fakes.teams_api import FakeTeams


@pytest.fixture
async def rig() -> AsyncIterator[tuple[TeamsHarness, list[DecisionEvent]]]:
    """A running surface (with a replay ledger) and the decisions it handed on."""
    clock = FakeClock(NOW)
    events: list[DecisionEvent] = []

    async def on_decision(event: DecisionEvent) -> DecisionOutcome:
        events.append(event)
        return DecisionOutcome(True, "Approved once")

    async with FakeTeams() as fake:
        surface = teams_platform(fake, clock, replay=MemoryReplayLedger(clock=clock))
        async with route_client(surface) as client:
            harness = TeamsHarness(fake=fake, surface=surface, clock=clock, client=client)
            await harness.start(on_decision)
            yield harness, events
            await harness.stop()
        await surface.aclose()
        assert fake.violations == []


def _forged(fake: FakeTeams, activity: dict[str, Any], now: Any, how: str) -> str:
    """A token that is wrong in exactly one way."""
    if how == "other key":
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return fake.sign(activity, now=now, key=other)
    if how == "expired":
        return fake.sign(activity, now=now - timedelta(minutes=11))
    if how == "other audience":
        return fake.sign(activity, now=now, audience="someone-elses-bot")
    if how == "other issuer":
        return fake.sign(activity, now=now, issuer="https://evil.example.com")
    if how == "other serviceurl":
        return fake.sign(activity, now=now, serviceurl="https://evil.example.com/teams/")
    if how == "HS256":
        return jwt.encode({"iss": "https://api.botframework.com", "aud": fake.app_id,
                           "exp": int(now.timestamp()) + 300,
                           "serviceurl": activity["serviceUrl"]},
                          "x" * 32, algorithm="HS256", headers={"kid": fake.kid})
    return "not-a-jwt"


@pytest.mark.parametrize("how", ["other key", "expired", "other audience", "other issuer",
                                 "other serviceurl", "HS256", "garbage"])
async def test_a_bad_or_expired_token_is_401_and_decides_nothing(
        rig: tuple[TeamsHarness, list[DecisionEvent]], how: str) -> None:
    """A click whose JWT is forged, expired, for another bot or another service URL is
    refused with 401 and reaches no decision."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    click = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    response = await harness.post(click, token=_forged(harness.fake, click,
                                                      harness.clock.now(), how))
    assert response.status_code == 401
    assert events == []


async def test_a_click_without_any_token_is_401(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """No Authorization header: 401, nothing decided."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    click = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    response = await harness.client.post("/teams/messages", json=click)
    assert response.status_code == 401
    assert events == []


async def test_a_token_goes_stale_with_the_injected_clock(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """A token signed now is refused once the daemon's clock is past its expiry plus
    five minutes of skew, and accepted just before."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    click = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    token = harness.fake.sign(click, now=harness.clock.now())  # valid for 5 minutes
    harness.clock.advance(timedelta(minutes=9, seconds=59))
    assert (await harness.post(click, token=token)).status_code == 200
    harness.clock.advance(timedelta(seconds=2))
    again = harness.fake.click(ref.message_id, "Deny", aad=ALICE)  # a new activity
    assert (await harness.post(again, token=token)).status_code == 401
    assert len(events) == 1


async def test_a_valid_click_decides_once_even_when_delivered_twice(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """Teams retries an invoke it did not see answered: the same activity id decides once,
    and both deliveries are answered with the card."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    click = harness.fake.click(ref.message_id, "Session", aad=ALICE, name="Alice Doe")
    first, second = await harness.post(click), await harness.post(click)
    assert [r.status_code for r in (first, second)] == [200, 200]
    assert len(events) == 1
    event = events[0]
    assert (event.actor.key, event.actor.display, event.scope.value) == (
        f"teams:{ALICE}", "Alice Doe", "session")
    assert event.ref == CardRef("teams", harness.fake.conversation_id, ref.message_id)
    answer = first.json()
    assert answer["statusCode"] == 200
    assert answer["type"] == "application/vnd.microsoft.card.adaptive"
    assert answer["value"]["type"] == "AdaptiveCard"


async def test_a_click_without_an_aad_object_id_decides_nothing(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """An activity that does not say who clicked (no aadObjectId) is answered with the card
    and a line saying nothing was decided."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    response = await harness.post(harness.fake.click(ref.message_id, "Once", aad=None))
    assert events == []
    assert "nothing was decided" in str(response.json()["value"])


async def test_refresh_returns_the_card_and_lists_the_people_seen(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """The card's refresh action answers with the current card, which lists the Teams
    people who have clicked (by MRI) for automatic refresh; it decides nothing."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    await harness.post(harness.fake.click(ref.message_id, "Once", aad=ALICE, mri="29:1al"))
    refresh = harness.fake.click(ref.message_id, "Deny", aad=ALICE, mri="29:1al",
                                 verb=REFRESH_VERB)
    answer = (await harness.post(refresh)).json()
    assert len(events) == 1
    assert answer["value"]["refresh"]["userIds"] == ["29:1al"]
    assert answer["value"]["refresh"]["action"]["verb"] == REFRESH_VERB


async def test_the_bot_token_is_cached_until_it_expires(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """Three posts use one token; an hour later a new one is fetched."""
    harness, _ = rig
    for _ in range(3):
        await harness.surface.post_card(sample_card())
    assert harness.fake.tokens_issued == 1
    harness.clock.advance(timedelta(hours=1))
    await harness.surface.post_card(sample_card())
    assert harness.fake.tokens_issued == 2


@pytest.mark.parametrize(("status", "error"), [(429, RateLimited), (500, PlatformUnavailable),
                                               (503, PlatformUnavailable)])
async def test_connector_pushback_is_retryable(
        rig: tuple[TeamsHarness, list[DecisionEvent]], status: int, error: type) -> None:
    """429 and 5xx from the connector are the port's retryable errors (429 keeps
    Retry-After), and nothing was posted."""
    harness, _ = rig
    harness.fake.fail_next(1, status=status, retry_after=7)
    with pytest.raises(error) as raised:
        await harness.surface.post_card(sample_card())
    if status == 429:
        assert raised.value.retry_after == 7.0  # type: ignore[attr-defined]
    assert harness.fake.posted == []


async def test_refused_credentials_are_a_clear_final_error() -> None:
    """A wrong app password fails the start-up check with an error naming the keys."""
    async with FakeTeams() as fake:
        surface = teams_platform(fake, FakeClock(NOW))
        fake.app_password = "rotated"  # the secret was rotated in Entra ID
        with pytest.raises(PlatformRejected, match=r"teams\.app_password"):
            await surface.check()
        await surface.aclose()


async def test_a_reminder_is_a_reply_that_mentions_who_is_asked(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """A reminder under a card is a reply to it with an <at> mention entity per Teams
    person, named as Teams told us."""
    harness, _ = rig
    ref = await harness.surface.post_card(sample_card())
    await harness.post(harness.fake.click(ref.message_id, "Once", aad=ALICE, name="Alice Doe"))
    await harness.surface.notify("", "Still waiting for an answer", thread=ref,
                                 mentions=[f"teams:{ALICE}", "slack:U1"])
    reply = harness.fake.replies()[-1]
    assert reply.reply_to == ref.message_id
    assert reply.body["text"] == "Still waiting for an answer <at>Alice Doe</at>, slack:U1"
    assert reply.body["entities"] == [{"type": "mention", "text": "<at>Alice Doe</at>",
                                       "mentioned": {"id": ALICE, "name": "Alice Doe"}}]


async def test_a_held_card_shows_only_undo_and_a_decided_one_no_buttons(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """During the undo window the card's one button is Undo, which sends an undo; once
    decided the card keeps the action and shows the outcome without buttons."""
    harness, events = rig
    card = sample_card()
    ref = await harness.surface.post_card(card)
    held = replace(card, status="held", hold_until=card.requested_at + timedelta(seconds=30))
    await harness.surface.update_card(ref, held)
    assert harness.fake.activity(ref.message_id).labels == ("Undo",)
    await harness.post(harness.fake.click(ref.message_id, "Undo", aad=ALICE))
    assert events[-1].undo and events[-1].scope.value == "deny"
    done = replace(card, status="denied", outcome="Denied by teams:alice at 09:30 UTC")
    await harness.surface.update_card(ref, done)
    seen = harness.fake.activity(ref.message_id)
    assert seen.labels == () and "Denied by" in seen.text and "john@example.com" in seen.text
    assert seen.edits == 2


async def test_odd_bodies_are_refused_or_answered_never_crash(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """A body that is no JSON object is 400, one over 256 KiB is 413, and a signed click
    whose parts have the wrong shapes is answered without deciding anything."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    click = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    token = harness.fake.sign(click, now=harness.clock.now())
    headers = {"Authorization": f"Bearer {token}"}
    assert (await harness.client.post("/teams/messages", content=b"[1]",
                                      headers=headers)).status_code == 400
    assert (await harness.client.post("/teams/messages", content=b" " * 300_000,
                                      headers=headers)).status_code == 413
    odd = {**click, "from": ["x"], "conversation": "19:x", "replyToId": 7}
    response = await harness.post(odd)
    assert response.status_code == 200
    assert events == []


async def test_a_key_endorsed_for_teams_does_not_vouch_for_another_channel(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """The JWKS endorses the key for msteams only: the same signature on an activity that
    claims another channel (webchat) is 401 and decides nothing."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    click = {**harness.fake.click(ref.message_id, "Once", aad=ALICE), "channelId": "webchat"}
    assert (await harness.post(click)).status_code == 401
    assert events == []


async def test_a_click_from_web_chat_naming_an_approver_decides_nothing(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """Microsoft's keys are endorsed for every channel of the bot, Web Chat and Direct Line
    too, whose clients write ``from`` themselves: a well-signed invoke from ``webchat``
    that names Alice's aadObjectId (and our tenant) is answered with the card and decides
    nothing; the same click from Teams decides."""
    harness, events = rig
    harness.fake.endorsements = ("msteams", "webchat", "directline")
    ref = await harness.surface.post_card(sample_card())
    for channel in ("webchat", "directline"):
        spoofed = {**harness.fake.click(ref.message_id, "Once", aad=ALICE),
                   "channelId": channel}
        response = await harness.post(spoofed)
        assert response.status_code == 200
        assert "Only a click in Microsoft Teams decides" in str(response.json()["value"])
    assert events == []
    assert (await harness.post(harness.fake.click(ref.message_id, "Once", aad=ALICE))
            ).status_code == 200
    assert len(events) == 1


async def test_a_click_from_another_organization_decides_nothing(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """The bot installed in another tenant: a click there, however well signed, is answered
    with the card and "another organization", and decides nothing."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    click = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    click["conversation"]["tenantId"] = "00000000-0000-0000-0000-00000000beef"
    answer = (await harness.post(click)).json()
    assert events == []
    assert "another organization" in str(answer["value"])


async def test_a_click_without_an_id_or_a_tenant_decides_nothing(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """The token signs the service URL, not the body: a click with no activity id (no
    replay guard could hold it) or naming no tenant is answered with the card and decides
    nothing; the same click whole decides."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    no_id = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    del no_id["id"]
    no_tenant = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    del no_tenant["conversation"]["tenantId"], no_tenant["channelData"]
    for click in (no_id, no_tenant):
        assert (await harness.post(click)).status_code == 200
    assert events == []
    assert (await harness.post(harness.fake.click(ref.message_id, "Once", aad=ALICE))
            ).status_code == 200
    assert len(events) == 1


async def test_while_the_signing_keys_cannot_be_fetched_clicks_wait_and_decide_nothing(
        rig: tuple[TeamsHarness, list[DecisionEvent]]) -> None:
    """The OpenID metadata answers 500: a click is 503 (retry later), not decided; once it
    answers again the same click decides."""
    harness, events = rig
    ref = await harness.surface.post_card(sample_card())
    harness.fake.keys_down = True
    click = harness.fake.click(ref.message_id, "Once", aad=ALICE)
    response = await harness.post(click)
    assert (response.status_code, response.headers.get("retry-after")) == (503, "5")
    assert events == []
    harness.fake.keys_down = False
    assert (await harness.post(click)).status_code == 200
    assert len(events) == 1
