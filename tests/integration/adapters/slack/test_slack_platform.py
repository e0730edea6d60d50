"""SlackSurface against a local fake Slack: refusals, error mapping, start-up checks, acks.

Card rendering (blocks.py) is tested in tests/unit/adapters/slack/test_slack_blocks.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from urllib.parse import quote

import pytest

from signoff.adapters.slack import SlackSurface
from signoff.adapters.slack.guard import ReplayGuard
from signoff.bot.ports import ApprovalCard, CardRef, DecisionEvent, DecisionOutcome
from signoff.errors import ConfigError, PlatformRejected, PlatformUnavailable, RateLimited
from signoff.runtime.models import Scope
from signoff.testing import sample_card
from tests.fakes.slack_api import (
    APP_TOKEN,
    APPROVALS,
    BOT_TOKEN,
    SECRET,
    FakeSlack,
    SlackHarness,
    interaction_body,
    sign,
    signed_interaction,
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


@pytest.fixture
async def http(fake: FakeSlack) -> AsyncIterator[SlackHarness]:
    harness = SlackHarness.http_mode(fake)
    yield harness
    await harness.stop()


@pytest.fixture
async def sock(fake: FakeSlack) -> AsyncIterator[SlackHarness]:
    harness = SlackHarness.socket(fake)
    yield harness
    await harness.stop()


class Decisions:
    """An on_decision handler that records events and answers with a fixed outcome."""

    def __init__(self, outcome: DecisionOutcome | None = None) -> None:
        self.events: list[DecisionEvent] = []
        self.outcome = outcome or DecisionOutcome(True, "Approved once")

    async def __call__(self, event: DecisionEvent) -> DecisionOutcome:
        self.events.append(event)
        return self.outcome


async def posted(harness: SlackHarness) -> tuple[CardRef, ApprovalCard]:
    card = sample_card()
    return await harness.surface.post_card(card), card


# -- http mode: what is refused ------------------------------------------------------------


async def test_bad_signature_is_401_and_nothing_is_decided(http: SlackHarness) -> None:
    """A request signed with another secret gets 401 and reaches nobody."""
    decisions = Decisions()
    await http.start(decisions)
    ref, _ = await posted(http)
    response = await http.post_signed(http.payload(ref, Scope.ONCE, "U0ALICE"),
                                      secret="not-the-secret")
    assert response.status_code == 401
    assert decisions.events == []


async def test_missing_signature_is_401(http: SlackHarness) -> None:
    """A request without Slack's signature headers gets 401."""
    await http.start(Decisions())
    ref, _ = await posted(http)
    body = interaction_body(http.payload(ref, Scope.ONCE, "U0ALICE"))
    response = await http.post(body, {"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 401


async def test_stale_timestamp_is_401(http: SlackHarness) -> None:
    """A correctly signed request more than 5 minutes old gets 401."""
    decisions = Decisions()
    await http.start(decisions)
    ref, _ = await posted(http)
    response = await http.post_signed(http.payload(ref, Scope.ONCE, "U0ALICE"),
                                      timestamp=int(time.time()) - 301)
    assert response.status_code == 401
    assert decisions.events == []


async def test_replayed_request_is_refused_and_decided_once(http: SlackHarness) -> None:
    """The very same signed request sent twice is handled once; the copy gets 401."""
    decisions = Decisions()
    await http.start(decisions)
    ref, _ = await posted(http)
    body, headers = signed_interaction(SECRET, http.payload(ref, Scope.ONCE, "U0ALICE"))
    first = await http.post(body, headers)
    await asyncio.wait_for(http.outcomes.get(), 5)
    again = await http.post(body, headers)
    assert (first.status_code, again.status_code) == (200, 401)
    assert len(decisions.events) == 1


async def test_malformed_payload_is_400_and_the_app_keeps_serving(http: SlackHarness) -> None:
    """A signed body that is not JSON gets 400; the next real click is still decided."""
    decisions = Decisions()
    await http.start(decisions)
    body = b"payload=%7Bnot-json"
    response = await http.post(body, sign(SECRET, body))
    assert response.status_code == 400
    ref, card = await posted(http)
    await http.click(ref, card, Scope.ONCE, "U0ALICE")
    assert [e.scope for e in decisions.events] == [Scope.ONCE]


async def test_block_actions_without_actions_list_is_400(http: SlackHarness) -> None:
    """A signed block_actions payload whose actions are not a list is refused with 400."""
    decisions = Decisions()
    await http.start(decisions)
    ref, _ = await posted(http)
    payload = http.payload(ref, Scope.ONCE, "U0ALICE")
    payload["actions"] = "signoff_once"
    assert (await http.post_signed(payload)).status_code == 400
    assert decisions.events == []


_CLICK = {"action_id": "signoff_once", "value": "a1"}
MALFORMED = {
    "no actions": json.dumps({"type": "block_actions", "actions": []}),
    "number as user": json.dumps({"type": "block_actions", "user": 5, "actions": [_CLICK]}),
    "list as user": json.dumps({"type": "block_actions", "user": ["U1"], "actions": [_CLICK]}),
    "number as user id": json.dumps({"type": "block_actions", "user": {"id": 5},
                                     "actions": [_CLICK]}),
    "number as team": json.dumps({"type": "block_actions", "team": 5, "actions": [_CLICK]}),
    "number as channel": json.dumps({"type": "block_actions", "channel": 5,
                                     "actions": [_CLICK]}),
    "number as event": json.dumps({"type": "event_callback", "event": 5}),
    "number as view": json.dumps({"type": "view_submission", "view": 5}),
    "number as type": json.dumps({"type": 5}),
    "100,000 nested [": "[" * 100_000,
    "100,000 nested [ in an object": '{"type": "block_actions", "actions": ' + "[" * 100_000,
}


@pytest.mark.parametrize("form", [True, False], ids=["form", "json"])
@pytest.mark.parametrize("name", list(MALFORMED))
async def test_signed_malformed_payloads_get_4xx_and_are_logged(
        http: SlackHarness, caplog: pytest.LogCaptureFixture, name: str, form: bool) -> None:
    """A validly signed payload bolt cannot read gets a 4xx and a log line, never a 5xx."""
    caplog.set_level(logging.WARNING, logger="signoff.adapters.slack")
    decisions = Decisions()
    await http.start(decisions)
    raw = MALFORMED[name]
    body = interaction_body_raw(raw) if form else raw.encode()
    headers = sign(SECRET, body)
    if not form:
        headers["Content-Type"] = "application/json"
    response = await http.post(body, headers)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert "slack_request_" in caplog.text
    assert decisions.events == []
    ref, card = await posted(http)  # the app keeps serving
    await http.click(ref, card, Scope.ONCE, "U0ALICE")
    assert len(decisions.events) == 1


def interaction_body_raw(payload: str) -> bytes:
    """``payload=<url-quoted text>``, whatever the text is."""
    return ("payload=" + quote(payload, safe="")).encode()


async def test_malformed_socket_envelopes_are_ignored_and_the_socket_keeps_serving(
        sock: SlackHarness) -> None:
    """Odd envelopes over the socket decide nothing; the next real click still works."""
    decisions = Decisions()
    await sock.start(decisions)
    ref, card = await posted(sock)
    odd = sock.payload(ref, Scope.ONCE, "U0ALICE")
    odd["actions"][0]["action_id"] = "signoff_forever"
    await sock.send(odd)  # acked (it is a click on our button), then ignored
    await sock.click(ref, card, Scope.DENY, "U0ALICE")
    assert [e.scope for e in decisions.events] == [Scope.DENY]


@pytest.mark.parametrize("change", [{"action_id": "signoff_forever"}, {"value": None}])
async def test_malformed_action_is_acked_ignored_and_logged(
        http: SlackHarness, change: dict[str, object], caplog: pytest.LogCaptureFixture) -> None:
    """A signoff button with an unknown scope or no approval id is acked, logged, not decided."""
    caplog.set_level(logging.WARNING, logger="signoff.adapters.slack")
    decisions = Decisions()
    await http.start(decisions)
    ref, _ = await posted(http)
    payload = http.payload(ref, Scope.ONCE, "U0ALICE")
    payload["actions"][0].update(change)
    await http.send(payload)
    assert "slack_action_malformed" in caplog.text
    assert decisions.events == []


async def test_request_before_run_gets_503(http: SlackHarness) -> None:
    """An authentic click before run() started is refused with 503, never half-handled."""
    ref, _ = await posted(http)
    response = await http.post_signed(http.payload(ref, Scope.ONCE, "U0ALICE"))
    assert response.status_code == 503


async def test_handle_http_in_socket_mode_is_404(sock: SlackHarness) -> None:
    """A socket-mode platform does not serve /slack/events."""
    from starlette.requests import Request

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    request = Request({"type": "http", "method": "POST", "path": "/slack/events",
                       "headers": [], "query_string": b""}, receive)
    response = await sock.surface.handle_http(request)
    assert response.status_code == 404


# -- decisions ---------------------------------------------------------------------------------


async def test_unknown_approval_reaches_the_clicker_as_ephemeral(http: SlackHarness) -> None:
    """The flow's refusal for an unknown approval id is shown to the clicker only."""
    decisions = Decisions(DecisionOutcome(False, "This approval request is unknown", code="unknown"))
    await http.start(decisions)
    ref, _ = await posted(http)
    await http.send(http.payload(ref, Scope.DENY, "U0MALLORY", value="ap-does-not-exist"))
    await asyncio.wait_for(http.outcomes.get(), 5)
    [told] = await http.fake.wait_for_calls("chat.postEphemeral")
    assert told.body["user"] == "U0MALLORY"
    assert told.body["channel"] == APPROVALS
    assert "unknown" in told.body["text"]
    assert decisions.events[0].approval_id == "ap-does-not-exist"
    assert (await http.rendered(ref)).buttons, "the card stays open"


async def test_failing_decision_handler_tells_the_clicker_and_keeps_serving(
        http: SlackHarness) -> None:
    """If on_decision raises, the clicker hears so and later clicks still work."""
    calls = 0

    async def flaky(event: DecisionEvent) -> DecisionOutcome:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database is on fire")
        return DecisionOutcome(True, "ok")

    await http.start(flaky)
    ref, card = await posted(http)
    await http.click(ref, card, Scope.ONCE, "U0ALICE")
    assert any("could not be recorded" in t for t in await http.feedback())
    await http.click(ref, card, Scope.ONCE, "U0ALICE")
    assert calls == 2


async def test_http_ack_returns_before_a_slow_decision_finishes(http: SlackHarness) -> None:
    """The HTTP reply (the ack) goes out while the decision handler is still working."""
    release, finished = asyncio.Event(), asyncio.Event()

    async def slow(event: DecisionEvent) -> DecisionOutcome:
        await release.wait()  # stands for a 2 s tool run
        finished.set()
        return DecisionOutcome(True, "ok")

    await http.start(slow)
    ref, _ = await posted(http)
    await http.send(http.payload(ref, Scope.ONCE, "U0ALICE"))  # asserts the 200
    assert not finished.is_set(), "the ack waited for the decision"
    release.set()
    await asyncio.wait_for(finished.wait(), 5)


async def test_socket_ack_is_sent_before_a_slow_decision_finishes(sock: SlackHarness) -> None:
    """Over Socket Mode, the envelope is acked while the decision handler is still working."""
    release, finished = asyncio.Event(), asyncio.Event()

    async def slow(event: DecisionEvent) -> DecisionOutcome:
        await release.wait()
        finished.set()
        return DecisionOutcome(True, "ok")

    await sock.start(slow)
    ref, _ = await posted(sock)
    ack = await sock.send(sock.payload(ref, Scope.SESSION, "U0ALICE"))
    assert ack is not None and set(ack) == {"envelope_id"}
    assert not finished.is_set(), "the ack waited for the decision"
    release.set()
    await asyncio.wait_for(finished.wait(), 5)


async def test_stop_cancels_a_pending_decision_and_closes_the_socket(sock: SlackHarness) -> None:
    """Cancelling run() ends in-flight decisions and closes the websocket cleanly."""
    cancelled = asyncio.Event()

    async def stuck(event: DecisionEvent) -> DecisionOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    await sock.start(stuck)
    ref, _ = await posted(sock)
    await sock.send(sock.payload(ref, Scope.ONCE, "U0ALICE"))
    await sock.stop()
    assert cancelled.is_set()
    await sock.fake.wait_socket(connected=False)
    assert not sock.surface.running


async def test_socket_reconnects_when_slack_asks_and_clicks_still_work(sock: SlackHarness) -> None:
    """After Slack's `disconnect` message the client takes a new URL and keeps working."""
    decisions = Decisions()
    await sock.start(decisions)
    await sock.fake.send_socket_disconnect()
    await sock.fake.wait_socket_connects(2)
    ref, card = await posted(sock)
    await sock.click(ref, card, Scope.ONCE, "U0ALICE")
    assert len(sock.fake.calls_to("apps.connections.open")) == 2
    assert [e.scope for e in decisions.events] == [Scope.ONCE]


async def test_socket_run_with_a_refused_app_token_raises(fake: FakeSlack) -> None:
    """A refused xapp- token ends run() with PlatformRejected naming slack.app_token."""
    fake.invalid_app_token = True
    platform = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="socket",
                             app_token=APP_TOKEN, api_url=fake.api_url)
    with pytest.raises(PlatformRejected, match="app_token"):
        await platform.run(Decisions())
    assert not platform.running


# -- outbound calls ------------------------------------------------------------------------------


async def test_update_card_edits_the_stored_message(http: SlackHarness) -> None:
    """update_card calls chat.update on the card's channel and ts; its buttons go away."""
    ref, card = await posted(http)
    decided = replace(card, status="denied", outcome="Denied by slack:U0ALICE at 14:03 UTC")
    await http.surface.update_card(ref, decided)
    [update] = http.fake.calls_to("chat.update")
    assert (update.body["channel"], update.body["ts"]) == (ref.channel, ref.message_id)
    seen = await http.rendered(ref)
    assert seen.buttons == ()
    assert "Denied by <@U0ALICE>" in seen.text


async def test_notify_in_a_thread_replies_under_the_card(http: SlackHarness) -> None:
    """notify with a card ref posts a threaded reply in the card's channel."""
    ref, _ = await posted(http)
    await http.surface.notify("C0TEAM", "Task t-contract completed", thread=ref)
    reply = http.fake.calls_to("chat.postMessage")[-1].body
    assert (reply["channel"], reply["thread_ts"]) == (ref.channel, ref.message_id)


async def test_notify_with_mentions_is_a_broadcast_reply_that_mentions_them(
        http: SlackHarness) -> None:
    """A reply meant for people mentions Slack members and is shown in the channel too."""
    ref, _ = await posted(http)
    await http.surface.notify("", "Escalated <now>:", thread=ref,
                              mentions=["slack:U0BOB", "telegram:42", "slack:<!here>"])
    reply = http.fake.calls_to("chat.postMessage")[-1].body
    assert (reply["channel"], reply["thread_ts"]) == (ref.channel, ref.message_id)
    assert reply["reply_broadcast"] is True
    assert reply["text"] == "Escalated &lt;now&gt;: <@U0BOB>, telegram:42, slack:&lt;!here&gt;"
    plain = await http.surface.notify("C0TEAM", "no one to alert", thread=ref)
    assert plain is None and "reply_broadcast" not in http.fake.calls_to("chat.postMessage")[-1].body


async def test_notify_escapes_special_mentions(http: SlackHarness) -> None:
    """A goal that says <!channel> cannot page the whole channel."""
    await http.surface.notify("C0TEAM", "Task done: <!channel> ping")
    assert http.fake.posted_texts("C0TEAM") == ["Task done: &lt;!channel&gt; ping"]


async def test_ratelimited_raises_rate_limited_with_retry_after(http: SlackHarness) -> None:
    """HTTP 429 ratelimited with Retry-After: 2 → RateLimited(retry_after=2)."""
    http.fake.rate_limit_next("chat.postMessage", retry_after=2)
    with pytest.raises(RateLimited) as caught:
        await http.surface.post_card(sample_card())
    assert caught.value.retry_after == 2


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_raise_unavailable(http: SlackHarness, status: int) -> None:
    """A 5xx from Slack is retryable: PlatformUnavailable."""
    ref, card = await posted(http)
    http.fake.fail_next("chat.update", status=status)
    with pytest.raises(PlatformUnavailable):
        await http.surface.update_card(ref, card)


async def test_timeout_raises_unavailable(fake: FakeSlack) -> None:
    """A call that outlives the timeout is retryable: PlatformUnavailable."""
    platform = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                             signing_secret=SECRET, api_url=fake.api_url, timeout=0.2)
    fake.stall_next("chat.postMessage")
    with pytest.raises(PlatformUnavailable):
        await platform.post_card(sample_card())


async def test_connection_refused_raises_unavailable() -> None:
    """Nobody listening at api_url is retryable: PlatformUnavailable."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    platform = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                             signing_secret=SECRET, api_url=f"http://127.0.0.1:{port}/api/")
    with pytest.raises(PlatformUnavailable):
        await platform.notify("C0TEAM", "hello")


async def test_unknown_channel_is_rejected_naming_the_error(fake: FakeSlack) -> None:
    """channel_not_found is final: PlatformRejected naming it."""
    platform = SlackSurface(bot_token=BOT_TOKEN, channel="C0GONE", mode="http",
                             signing_secret=SECRET, api_url=fake.api_url)
    with pytest.raises(PlatformRejected, match="channel_not_found"):
        await platform.post_card(sample_card())


async def test_missing_scope_error_names_the_needed_scope(http: SlackHarness) -> None:
    """A missing_scope answer becomes PlatformRejected naming Slack's `needed` scope."""
    http.fake.scopes = {"commands"}
    with pytest.raises(PlatformRejected, match=r"missing_scope.*chat:write"):
        await http.surface.post_card(sample_card())


# -- check() at start-up ----------------------------------------------------------------------


async def test_check_passes_with_a_good_token(http: SlackHarness, sock: SlackHarness) -> None:
    """auth.test with chat:write granted (and, in socket mode, a good app token) passes."""
    await http.surface.check()
    await sock.surface.check()
    assert [c.method for c in http.fake.calls] == ["auth.test", "auth.test", "apps.connections.open"]


async def test_check_with_invalid_auth_is_rejected(http: SlackHarness) -> None:
    """An invalid bot token gives PlatformRejected naming invalid_auth and the setting."""
    http.fake.invalid_auth = True
    with pytest.raises(PlatformRejected, match=r"invalid_auth.*slack\.bot_token"):
        await http.surface.check()


async def test_check_names_a_missing_scope(http: SlackHarness) -> None:
    """A token without chat:write gives PlatformRejected naming chat:write."""
    http.fake.scopes = {"commands", "channels:read"}
    with pytest.raises(PlatformRejected, match="chat:write"):
        await http.surface.check()


async def test_check_with_a_refused_app_token_is_rejected(sock: SlackHarness) -> None:
    """In socket mode a refused xapp- token is named at start-up."""
    sock.fake.invalid_app_token = True
    with pytest.raises(PlatformRejected, match="app_token"):
        await sock.surface.check()


async def test_check_when_slack_is_down_is_unavailable(http: SlackHarness) -> None:
    """A 503 from auth.test is retryable, not a configuration problem."""
    http.fake.fail_next("auth.test")
    with pytest.raises(PlatformUnavailable):
        await http.surface.check()


# -- configuration, logging, replay guard -----------------------------------------------------------


@pytest.mark.parametrize("options", [
    {"mode": "socket"},
    {"mode": "http"},
    {"mode": "webhook", "app_token": APP_TOKEN},
    {"mode": "socket", "app_token": APP_TOKEN, "timeout": 0},
])
def test_bad_configuration_is_a_config_error(options: dict[str, object]) -> None:
    """Missing tokens for the mode, an unknown mode or a zero timeout are ConfigErrors."""
    with pytest.raises(ConfigError):
        SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, **options)  # type: ignore[arg-type]


async def test_logs_carry_no_token_secret_or_message_body(
        http: SlackHarness, caplog: pytest.LogCaptureFixture) -> None:
    """A full round (post, refused click, edit, notify) logs ids but no secrets or bodies."""
    caplog.set_level(logging.INFO)
    await http.start(Decisions(DecisionOutcome(False, "Not authorized to decide this")))
    ref, card = await posted(http)
    await http.click(ref, card, Scope.ONCE, "U0ALICE")
    await http.surface.update_card(ref, card)
    await http.surface.notify("C0TEAM", "secret quarterly numbers")
    assert "slack_decision approval_id=ap7Q2xK9" in caplog.text
    for secret in (BOT_TOKEN, SECRET, "Hi John", "secret quarterly", "Not authorized"):
        assert secret not in caplog.text


def test_replay_guard_forgets_stale_pairs_and_stays_bounded() -> None:
    """Pairs are forgotten once their timestamp leaves the window; size never exceeds capacity."""
    now = [1_000_000.0]
    guard = ReplayGuard(capacity=3, now=lambda: now[0])
    assert guard.first_time(1_000_000, "v0=a")
    assert not guard.first_time(1_000_000, "v0=a")
    for sig in ("v0=b", "v0=c", "v0=d"):
        assert guard.first_time(1_000_000, sig)
    assert len(guard) == 3
    now[0] += 301
    assert guard.first_time(1_000_000, "v0=a"), "stale pairs are forgotten (the window refuses them)"
    assert len(guard) == 1
