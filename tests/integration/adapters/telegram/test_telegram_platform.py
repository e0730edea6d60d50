"""TelegramSurface against the fake Bot API: webhook security, taps, commands, errors, bursts."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from signoff.adapters.telegram import TelegramSurface
from signoff.bot.ports import (
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionOutcome,
    Surface,
)
from signoff.errors import ConfigError, PlatformRejected, PlatformUnavailable, RateLimited
from signoff.runtime.models import Scope
from signoff.testing import sample_card
from tests.fakes.telegram_api import FakeMessage, FakeTelegramApi, user

CHAT = "-1001234567890"
SECRET = "s3cret_token-1"
WEBHOOK_URL = "https://signoff.example.com/telegram/webhook"
HEADER = "X-Telegram-Bot-Api-Secret-Token"

Factory = Callable[..., TelegramSurface]


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramApi]:
    """A fresh fake Bot API server."""
    async with FakeTelegramApi() as server:
        yield server


@pytest.fixture
async def make_platform(fake: FakeTelegramApi) -> AsyncIterator[Factory]:
    """Build TelegramSurfaces pointed at the fake; closed after the test."""
    made: list[TelegramSurface] = []

    def make(**changes: Any) -> TelegramSurface:
        options: dict[str, Any] = {"bot_token": fake.token, "chat_id": CHAT, "mode": "polling",
                                   "base_url": fake.base_url,
                                   "base_file_url": fake.base_file_url, "timeout": 5.0}
        options.update(changes)
        platform = TelegramSurface(**options)
        made.append(platform)
        return platform

    yield make
    for platform in made:
        await platform.aclose()
    assert fake.violations == [], "callback_data over 64 bytes reached the server"


class Flow:
    """Stands in for the approval flow: records events and answers with a fixed outcome."""

    def __init__(self, outcome: DecisionOutcome | None = None) -> None:
        self.events: list[DecisionEvent] = []
        self.outcome = outcome or DecisionOutcome(True, "Approved once")

    async def __call__(self, event: DecisionEvent) -> DecisionOutcome:
        self.events.append(event)
        return self.outcome


@asynccontextmanager
async def running(platform: TelegramSurface, fake: FakeTelegramApi,
                  on_decision: Callable[[DecisionEvent], Awaitable[DecisionOutcome]]
                  ) -> AsyncIterator[asyncio.Task[None]]:
    """Run the platform until the block ends; enter once it takes updates."""
    task = asyncio.create_task(platform.run(on_decision))
    ready = "getUpdates" if platform.mode == "polling" else "setWebhook"
    waiting = asyncio.create_task(fake.wait_call(ready))
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiting.cancel()
        task.result()
    await waiting
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def webhook_client(platform: TelegramSurface) -> httpx.AsyncClient:
    """An HTTP client for a small app mounting the platform at POST /telegram/webhook."""
    app = Starlette(routes=[Route("/telegram/webhook", platform.handle_webhook,
                                  methods=["POST"])])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://daemon")


async def tap_and_wait(fake: FakeTelegramApi, update: dict[str, Any]) -> str | None:
    """Feed a callback_query through getUpdates; return the toast it was answered with."""
    fake.push_update(update)
    return await fake.wait_answer(fake.query_id(update))


async def command(fake: FakeTelegramApi, text: str, chat: str = CHAT,
                  sender: dict[str, Any] | None = None) -> str:
    """Send a text command through getUpdates; return the bot's answer.

    In groups the answer quotes the command; in private chats Telegram clients need no quote.
    """
    update = fake.command_update(chat, text, sender)
    asked = update["message"]["message_id"]
    fake.push_update(update)

    def answers() -> list[FakeMessage]:
        return [m for m in fake.chat_messages(chat) if m.message_id > asked]

    await fake.wait_until(lambda: bool(answers()))
    answer = answers()[0]
    if int(chat) < 0:
        assert answer.reply_to == asked
    return answer.text


def outbound(fake: FakeTelegramApi) -> list[str]:
    """Calls that change what people see (sends and edits)."""
    return [c.method for c in fake.calls
            if c.method in ("sendMessage", "editMessageText", "editMessageReplyMarkup")]


# --- webhook ------------------------------------------------------------------------------


async def test_webhook_without_or_with_wrong_secret_is_401(make_platform: Factory,
                                                          fake: FakeTelegramApi) -> None:
    """No secret header, or a wrong one, gets 401 and nothing reaches the flow."""
    platform = make_platform(mode="webhook", webhook_secret=SECRET, webhook_url=WEBHOOK_URL)
    flow = Flow()
    ref = await platform.post_card(sample_card())
    update = fake.tap(ref.channel, ref.message_id, "Once")
    async with running(platform, fake, flow), webhook_client(platform) as client:
        missing = await client.post("/telegram/webhook", json=update)
        wrong = await client.post("/telegram/webhook", json=update,
                                  headers={HEADER: SECRET + "x"})
        empty = await client.post("/telegram/webhook", json=update, headers={HEADER: ""})
    assert (missing.status_code, wrong.status_code, empty.status_code) == (401, 401, 401)
    assert flow.events == []
    assert fake.answers == {}


async def test_webhook_bad_json_is_400_and_before_run_is_503(make_platform: Factory,
                                                            fake: FakeTelegramApi) -> None:
    """Before run() the endpoint says 503 (Telegram retries); a body that is no update is 400."""
    platform = make_platform(mode="webhook", webhook_secret=SECRET, webhook_url=WEBHOOK_URL)
    async with webhook_client(platform) as client:
        early = await client.post("/telegram/webhook", json={"update_id": 1},
                                  headers={HEADER: SECRET})
        async with running(platform, fake, Flow()):
            broken = await client.post("/telegram/webhook", content=b"{not json",
                                       headers={HEADER: SECRET})
            shapeless = await client.post("/telegram/webhook", json=[1, 2],
                                          headers={HEADER: SECRET})
            odd = await client.post("/telegram/webhook",
                                    json={"update_id": 5, "callback_query": "x"},
                                    headers={HEADER: SECRET})
    assert early.status_code == 503
    assert broken.status_code == 400
    assert shapeless.status_code == 400
    assert odd.status_code == 400


@pytest.mark.parametrize("body", ["[" * 100_000, '{"update_id": 1, "message": ' + "[" * 100_000],
                         ids=["nested list", "nested in an update"])
async def test_webhook_deeply_nested_body_is_400_and_logged(
        make_platform: Factory, fake: FakeTelegramApi, caplog: pytest.LogCaptureFixture,
        body: str) -> None:
    """A body of 100,000 nested "[" with the right secret gets 400 and a log line, not 500."""
    caplog.set_level(logging.WARNING, logger="signoff.adapters.telegram")
    platform = make_platform(mode="webhook", webhook_secret=SECRET, webhook_url=WEBHOOK_URL)
    async with running(platform, fake, Flow()), webhook_client(platform) as client:
        response = await client.post("/telegram/webhook", content=body.encode(),
                                     headers={HEADER: SECRET,
                                              "Content-Type": "application/json"})
    assert response.status_code == 400
    assert "telegram_webhook_malformed error=RecursionError" in caplog.text


async def test_callback_query_without_sender_is_answered_and_decides_nothing(
        make_platform: Factory, fake: FakeTelegramApi,
        caplog: pytest.LogCaptureFixture) -> None:
    """A tap with no ``from`` (over the webhook) is accepted, answered, and decides nothing."""
    caplog.set_level(logging.WARNING)
    platform = make_platform(mode="webhook", webhook_secret=SECRET, webhook_url=WEBHOOK_URL)
    flow = Flow()
    ref = await platform.post_card(sample_card())
    update = fake.tap(ref.channel, ref.message_id, "Once")
    del update["callback_query"]["from"]
    async with running(platform, fake, flow), webhook_client(platform) as client:
        response = await client.post("/telegram/webhook", json=update, headers={HEADER: SECRET})
        toast = await fake.wait_answer(fake.query_id(update))
    assert response.status_code == 200
    assert toast is not None and "nothing was decided" in toast
    assert flow.events == []
    assert "telegram_callback_anonymous" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_webhook_tap_reaches_the_flow(make_platform: Factory,
                                            fake: FakeTelegramApi) -> None:
    """A signed webhook delivery is answered 200 and becomes one decision."""
    platform = make_platform(mode="webhook", webhook_secret=SECRET, webhook_url=WEBHOOK_URL)
    flow = Flow(DecisionOutcome(True, "Approved always"))
    ref = await platform.post_card(sample_card())
    update = fake.tap(ref.channel, ref.message_id, "Always", user(77, "bob"))
    async with running(platform, fake, flow), webhook_client(platform) as client:
        response = await client.post("/telegram/webhook", json=update, headers={HEADER: SECRET})
        assert await fake.wait_answer(fake.query_id(update)) == "Approved always"
    assert response.status_code == 200
    [event] = flow.events
    assert (event.scope, event.actor.key, event.actor.display) == (Scope.ALWAYS, "telegram:77",
                                                                    "bob")
    assert event.ref == ref


async def test_set_webhook_sends_url_and_secret(make_platform: Factory,
                                                fake: FakeTelegramApi) -> None:
    """With webhook_url set, run() registers the webhook with its secret token."""
    platform = make_platform(mode="webhook", webhook_secret=SECRET, webhook_url=WEBHOOK_URL)
    async with running(platform, fake, Flow()):
        assert fake.webhook is not None
        assert fake.webhook["url"] == WEBHOOK_URL
        assert fake.webhook["secret_token"] == SECRET


def test_is_a_chat_platform_and_validates_its_config(fake: FakeTelegramApi) -> None:
    """TelegramSurface satisfies the port; an empty token or unknown mode is a ConfigError."""
    platform: Surface = TelegramSurface(bot_token=fake.token, chat_id=CHAT)
    assert isinstance(platform, Surface)
    assert platform.name == "telegram"
    with pytest.raises(ConfigError, match="bot_token"):
        TelegramSurface(bot_token="", chat_id=CHAT)
    with pytest.raises(ConfigError, match=r"telegram\.mode"):
        TelegramSurface(bot_token=fake.token, chat_id=CHAT, mode="carrier-pigeon")  # type: ignore[arg-type]


def test_webhook_mode_needs_a_valid_secret(fake: FakeTelegramApi) -> None:
    """Webhook mode without a secret (or with characters Telegram refuses) is a ConfigError."""
    with pytest.raises(ConfigError, match="webhook_secret"):
        TelegramSurface(bot_token=fake.token, chat_id=CHAT, mode="webhook")
    with pytest.raises(ConfigError, match="webhook_secret"):
        TelegramSurface(bot_token=fake.token, chat_id=CHAT, mode="webhook",
                         webhook_secret="has spaces")


# --- taps -----------------------------------------------------------------------------------


async def test_malformed_callback_data_is_answered_and_ignored(make_platform: Factory,
                                                               fake: FakeTelegramApi) -> None:
    """Data that is not ours gets a toast, and nothing else happens."""
    platform = make_platform()
    flow = Flow()
    ref = await platform.post_card(sample_card())
    async with running(platform, fake, flow):
        before = outbound(fake)
        toast = await tap_and_wait(fake, fake.callback_update(ref.channel, ref.message_id,
                                                              "so:garbage"))
    assert toast == "Unknown or expired request"
    assert flow.events == []
    assert outbound(fake) == before


async def test_unknown_approval_is_answered_and_ignored(make_platform: Factory,
                                                        fake: FakeTelegramApi) -> None:
    """A well-formed tap naming an approval the flow does not know gets the flow's toast only."""
    platform = make_platform()
    flow = Flow(DecisionOutcome(False, "Unknown or expired request", code="unknown"))
    ref = await platform.post_card(sample_card())
    async with running(platform, fake, flow):
        before = outbound(fake)
        toast = await tap_and_wait(fake, fake.callback_update(ref.channel, ref.message_id,
                                                              "so:nosuchid:o"))
    assert toast == "Unknown or expired request"
    assert [e.approval_id for e in flow.events] == ["nosuchid"]
    assert outbound(fake) == before
    assert fake.message(ref.channel, ref.message_id).labels, "the card stays open"


async def test_tap_is_answered_even_when_the_flow_fails(make_platform: Factory,
                                                        fake: FakeTelegramApi) -> None:
    """An exception in the flow still stops the person's spinner with a short toast."""
    platform = make_platform()

    async def broken(event: DecisionEvent) -> DecisionOutcome:
        raise RuntimeError("database is down")

    ref = await platform.post_card(sample_card())
    async with running(platform, fake, broken):
        toast = await tap_and_wait(fake, fake.tap(ref.channel, ref.message_id, "Deny"))
    assert toast == "Something went wrong; please try again"


# --- text commands ------------------------------------------------------------------------


async def test_approve_command_reaches_the_flow_and_gets_a_reply(make_platform: Factory,
                                                                 fake: FakeTelegramApi) -> None:
    """/approve <id> session decides through the flow; the reply is the outcome message."""
    platform = make_platform()
    flow = Flow(DecisionOutcome(True, "Approved for this session"))
    async with running(platform, fake, flow):
        reply = await command(fake, "/approve ap7Q2xK9 session", sender=user(42, "alice"))
        default = await command(fake, "/approve@signoff_test_bot ap7Q2xK9")
    assert reply == "Approved for this session"
    assert default == "Approved for this session"
    assert [(e.approval_id, e.scope) for e in flow.events] == [("ap7Q2xK9", Scope.SESSION),
                                                               ("ap7Q2xK9", Scope.ONCE)]
    assert flow.events[0].actor.key == "telegram:42"
    assert flow.events[0].surface == "telegram"
    assert [e.typed_in for e in flow.events] == [CHAT, CHAT]  # the flow checks the card is there


@pytest.mark.parametrize("chat", ["4242", "-1005550001"])  # a DM with the bot, another group
async def test_approve_outside_the_approval_chat_decides_nothing_and_says_where(
        make_platform: Factory, fake: FakeTelegramApi, chat: str) -> None:
    """/approve in a DM or another group never reaches the flow (no card, so nothing of the
    action was shown there); the bot answers plainly where to approve."""
    platform = make_platform()
    flow = Flow()
    async with running(platform, fake, flow):
        reply = await command(fake, "/approve ap7Q2xK9 always", chat=chat,
                              sender=user(42, "alice"))
    assert flow.events == []
    assert reply.startswith("Nothing was decided: /approve works only in the approval chat")
    assert "Approved" not in reply


async def test_deny_outside_the_approval_chat_still_decides(make_platform: Factory,
                                                            fake: FakeTelegramApi) -> None:
    """/deny in a DM reaches the flow: denying approves nothing, so it needs no card."""
    platform = make_platform()
    flow = Flow(DecisionOutcome(True, "Denied"))
    async with running(platform, fake, flow):
        reply = await command(fake, "/deny ap7Q2xK9 not tonight", chat="4242")
    assert reply == "Denied"
    [event] = flow.events
    assert (event.scope, event.reason, event.typed_in) == (Scope.DENY, "not tonight", "4242")


async def test_an_approval_chat_named_by_username_takes_approve(
        make_platform: Factory, fake: FakeTelegramApi) -> None:
    """chat_id = "@name" (a public group): /approve sent there counts as in the approval
    chat (Telegram's usernames are case-insensitive); sent in another group, it does not."""
    platform = make_platform(chat_id="@SignoffApprovals")
    flow = Flow()
    async with running(platform, fake, flow):
        approve = fake.command_update(CHAT, "/approve ap7Q2xK9")
        approve["message"]["chat"]["username"] = "signoffapprovals"
        fake.push_update(approve)
        await fake.wait_until(lambda: len(fake.chat_messages(CHAT)) == 1)
        other = await command(fake, "/approve ap7Q2xK9")  # the same id, no username
    assert [e.typed_in for e in flow.events] == [CHAT]
    assert fake.chat_messages(CHAT)[0].text == "Approved once"
    assert other.startswith("Nothing was decided")


async def test_approve_with_a_bad_scope_gets_usage_only(make_platform: Factory,
                                                        fake: FakeTelegramApi) -> None:
    """/approve with an unknown scope (or no id) explains the syntax and decides nothing."""
    platform = make_platform()
    flow = Flow()
    async with running(platform, fake, flow):
        bad = await command(fake, "/approve ap7Q2xK9 forever")
        bare = await command(fake, "/approve")
    assert "/approve <id> [once|session|always]" in bad
    assert "/deny <id> [reason]" in bare
    assert flow.events == []


async def test_deny_command_carries_the_reason(make_platform: Factory,
                                               fake: FakeTelegramApi) -> None:
    """/deny <id> <reason> becomes a deny with that reason."""
    platform = make_platform()
    flow = Flow(DecisionOutcome(True, "Denied"))
    async with running(platform, fake, flow):
        reply = await command(fake, "/deny ap7Q2xK9 wrong recipient list")
    assert reply == "Denied"
    [event] = flow.events
    assert (event.scope, event.reason) == (Scope.DENY, "wrong recipient list")


async def test_pending_lists_open_requests(make_platform: Factory,
                                           fake: FakeTelegramApi) -> None:
    """/pending in the approval chat lists what pending_lister returns, with the commands."""
    cards = [sample_card(), sample_card(approval_id="bq81", title="Delete file notes.txt")]

    async def lister() -> list[ApprovalCard]:
        return cards

    platform = make_platform(pending_lister=lister)
    async with running(platform, fake, Flow()):
        reply = await command(fake, "/pending")
        elsewhere = await command(fake, "/pending", chat="4242")
    assert "2 waiting for approval" in reply
    assert "ap7Q2xK9 — Send email to john@example.com" in reply
    assert "bq81 — Delete file notes.txt" in reply
    assert "/approve <id>" in reply
    assert "only in the approval chat" in elsewhere
    assert "john@example.com" not in elsewhere


async def test_help_tells_the_chat_id(make_platform: Factory, fake: FakeTelegramApi) -> None:
    """/help lists the commands and this chat's id (how people find telegram.chat_id)."""
    platform = make_platform()
    async with running(platform, fake, Flow()):
        reply = await command(fake, "/help", chat="-1005550001")
    assert "/pending" in reply
    assert "-1005550001" in reply


# --- outbound and errors ------------------------------------------------------------------


async def test_decided_card_keeps_action_text_and_loses_its_keyboard(
        make_platform: Factory, fake: FakeTelegramApi) -> None:
    """After the decision the same message shows action, targets and outcome; no buttons."""
    platform = make_platform()
    card = sample_card()
    ref = await platform.post_card(card)
    assert fake.message(CHAT, ref.message_id).labels == ("Once", "Session", "Always", "Deny")
    done = replace(card, status="approved", outcome="Approved once by telegram:42 at 14:03 UTC",
                   decided_by="telegram:42", decided_at=datetime.now(UTC))
    await platform.update_card(ref, done)
    await platform.update_card(ref, done)  # "message is not modified" is not an error
    message = fake.message(CHAT, ref.message_id)
    assert message.labels == ()
    assert "Send email to john@example.com" in message.text
    assert "Approved once by telegram:42" in message.text
    assert message.edits == 1


async def test_script_in_the_goal_is_shown_as_text(make_platform: Factory,
                                                   fake: FakeTelegramApi) -> None:
    """HTML in task data is escaped: Telegram accepts the message and shows the raw text."""
    platform = make_platform()
    ref = await platform.post_card(sample_card(goal="<script>alert('x')</script>"))
    message = fake.message(CHAT, ref.message_id)
    assert "<script>alert('x')</script>" in message.text
    assert "<script>" not in (message.html or "")


async def test_too_long_approval_id_never_reaches_telegram(make_platform: Factory,
                                                           fake: FakeTelegramApi) -> None:
    """An id that cannot fit in 64 bytes of callback_data is refused before sending."""
    platform = make_platform()
    with pytest.raises(PlatformRejected, match="64"):
        await platform.post_card(sample_card(approval_id="x" * 70))
    assert outbound(fake) == []


async def test_notify_posts_under_a_card(make_platform: Factory, fake: FakeTelegramApi) -> None:
    """notify with a thread replies to the card; the telegram: prefix is accepted."""
    platform = make_platform()
    ref = await platform.post_card(sample_card())
    await platform.notify(f"telegram:{CHAT}", "Task t1 completed <ok>", thread=ref)
    last = fake.chat_messages(CHAT)[-1]
    assert last.text == "Task t1 completed <ok>"
    assert last.reply_to == int(ref.message_id)


async def test_notify_with_mentions_replies_to_the_card_naming_them(
        make_platform: Factory, fake: FakeTelegramApi) -> None:
    """A reply meant for people quotes the card (Telegram notifies replies) and lists them."""
    platform = make_platform()
    ref = await platform.post_card(sample_card())
    await platform.notify("", "Escalated: your answer is needed:", thread=ref,
                          mentions=["telegram:42", "slack:U0BOB"])
    last = fake.chat_messages(CHAT)[-1]
    assert last.text == "Escalated: your answer is needed: telegram:42, slack:U0BOB"
    assert last.reply_to == int(ref.message_id)


async def test_429_becomes_rate_limited_with_retry_after(make_platform: Factory,
                                                         fake: FakeTelegramApi) -> None:
    """Telegram's retry_after is passed on; PTB does not retry by itself."""
    fake.set_rate_limit(1, window=60, retry_after=3)
    platform = make_platform()
    await platform.post_card(sample_card())
    with pytest.raises(RateLimited) as caught:
        await platform.post_card(sample_card())
    assert caught.value.retry_after == 3
    assert len(fake.calls_to("sendMessage")) == 2


async def test_forbidden_chat_is_rejected_with_a_clear_message(make_platform: Factory,
                                                               fake: FakeTelegramApi) -> None:
    """A bot removed from the chat (403) is a final error naming the chat."""
    fake.forbidden_chats.add(CHAT)
    platform = make_platform()
    with pytest.raises(PlatformRejected, match=f"removed from chat {CHAT} or blocked"):
        await platform.post_card(sample_card())


async def test_server_error_is_unavailable_then_recovers(make_platform: Factory,
                                                         fake: FakeTelegramApi) -> None:
    """A 5xx is retryable (PlatformUnavailable); the next call goes through."""
    platform = make_platform()
    await platform.check()
    fake.fail_next(1, method="sendMessage")
    with pytest.raises(PlatformUnavailable):
        await platform.post_card(sample_card())
    ref = await platform.post_card(sample_card())
    assert fake.message(CHAT, ref.message_id).labels


async def test_unreachable_server_is_unavailable(make_platform: Factory) -> None:
    """Connection refused is retryable."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    platform = make_platform(base_url=f"http://127.0.0.1:{port}/bot", timeout=2.0)
    with pytest.raises(PlatformUnavailable):
        await platform.post_card(sample_card())


async def test_edit_of_a_vanished_message_is_rejected(make_platform: Factory) -> None:
    """Editing a message that no longer exists is a final error."""
    platform = make_platform()
    with pytest.raises(PlatformRejected, match=r"(?i)message to edit not found"):
        await platform.update_card(CardRef("telegram", CHAT, "999"), sample_card())


async def test_check_with_a_bad_token_is_rejected_without_leaking_it(
        make_platform: Factory) -> None:
    """check() names the problem and never carries the token, not even in the cause."""
    token = "999999:WRONG-secret-token"
    platform = make_platform(bot_token=token)
    with pytest.raises(PlatformRejected, match="token was rejected") as caught:
        await platform.check()
    assert token not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


async def test_logs_never_carry_the_token_or_the_card_text(
        make_platform: Factory, fake: FakeTelegramApi, caplog: pytest.LogCaptureFixture) -> None:
    """httpx logs request URLs (which hold the token): they are redacted; bodies stay out."""
    caplog.set_level(logging.INFO)
    platform = make_platform()
    ref = await platform.post_card(sample_card(goal="quarterly numbers"))
    await platform.notify(CHAT, "private words", thread=ref)
    assert "HTTP Request" in caplog.text, "httpx did log the requests"
    assert fake.token not in caplog.text
    assert "quarterly numbers" not in caplog.text
    assert "private words" not in caplog.text


async def test_check_with_a_good_token_passes(make_platform: Factory,
                                              fake: FakeTelegramApi) -> None:
    """check() calls getMe."""
    await make_platform().check()
    assert fake.calls_to("getMe")


async def test_start_asks_getme_once_and_a_later_check_asks_again(
        make_platform: Factory, fake: FakeTelegramApi) -> None:
    """A start (the credentials check, then run) sends one getMe, not two; a later check
    asks again, so a token revoked since start-up shows."""
    platform = make_platform()
    await platform.check()
    async with running(platform, fake, Flow()):
        assert len(fake.calls_to("getMe")) == 1
        await platform.check()
        assert len(fake.calls_to("getMe")) == 2


async def test_run_with_a_bad_token_fails_fast(make_platform: Factory) -> None:
    """run() does not start polling on a rejected token."""
    platform = make_platform(bot_token="1:bad")
    with pytest.raises(PlatformRejected, match="token"):
        await asyncio.wait_for(platform.run(Flow()), 5)


async def test_run_stops_cleanly_when_cancelled(make_platform: Factory,
                                                fake: FakeTelegramApi) -> None:
    """Cancellation stops polling (confirming fetched updates) and releases everything."""
    platform = make_platform()
    async with running(platform, fake, Flow()) as task:
        polls = len(fake.calls_to("getUpdates"))
    assert task.cancelled()
    last = fake.calls_to("getUpdates")[-1]
    assert len(fake.calls_to("getUpdates")) > polls, "a final getUpdates confirms the offset"
    assert last.params.get("timeout") in ("0", 0)
    ref = await platform.post_card(sample_card())  # usable again after run() ended
    assert fake.message(CHAT, ref.message_id)


# --- burst --------------------------------------------------------------------------------


@pytest.mark.slow
async def test_burst_of_100_cards_arrives_complete_in_order_once(make_platform: Factory,
                                                                 fake: FakeTelegramApi) -> None:
    """100 cards to one chat under a 20-per-second chat limit: all arrive, in order, once."""
    fake.set_rate_limit(20, window=1.0, retry_after=0.2)
    # The per-group limiter (20/min, Telegram's published figure) would make this take five
    # minutes; here the server's 429s do the limiting, as they would for a busy chat.
    platform = make_platform(max_per_minute_per_group=0)
    retries = 0
    for i in range(100):
        card = sample_card(approval_id=f"burst{i:03d}", title=f"Send report #{i:03d}")
        while True:
            try:
                await platform.post_card(card)
                break
            except RateLimited as exc:
                retries += 1
                await asyncio.sleep(exc.retry_after)
    titles = [m.text.splitlines()[1] for m in fake.chat_messages(CHAT)]
    assert titles == [f"Send report #{i:03d}" for i in range(100)]
    assert retries > 0 and fake.rate_limited == retries
