"""`TelegramSurface`: approval cards as Telegram messages with inline buttons.

Built on python-telegram-bot's `Application`, pointed at ``base_url`` (the public Bot API,
a self-hosted Bot API server, or the tests' fake). Two ways to receive taps:

- ``polling``: `run` long-polls getUpdates inside the daemon's event loop — while this
  node holds the ``telegram-polling`` lease of its `Leadership` port. The Bot API allows
  one getUpdates consumer per token, so of several nodes on one database one polls and
  the others stand by (they still post and edit cards); when the leader dies, another
  takes the lease over and polls, from the offset Telegram kept;
- ``webhook``: Telegram POSTs updates to the daemon's ``/telegram/webhook``, which calls
  `TelegramSurface.handle_webhook`; `run` calls setWebhook when ``webhook_url`` is set.

Every update, however it arrived, is first recorded in the node's replay ledger by its
update id: one Telegram handed again to a new consumer (the old one died before
confirming it) or retried to the webhook is handled by one node, once.

Outbound calls go through `AIORateLimiter` with no retries of its own: a 429 surfaces
at once as `RateLimited` so the caller's durable outbox owns the retry.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    MessageEntity,
    ReplyParameters,
    Update,
    User,
)
from telegram import error as tg
from telegram.constants import ParseMode
from telegram.ext import (
    AIORateLimiter,
    Application,
    ApplicationBuilder,
    ApplicationHandlerStop,
    TypeHandler,
)

from signoff.bot.ports import ApprovalCard, CardRef, DecisionHandler, Route
from signoff.errors import ConfigError, PlatformRejected, PlatformUnavailable, StoreError
from signoff.runtime.leadership import Leadership, SoleLeadership
from signoff.runtime.replay import ReplayLedger

from . import logfilters
from .failures import BAD_TOKEN, is_not_modified, translate
from .fencing import FencedRequest
from .handlers import SURFACE, PendingLister, UpdateRouter
from .keyboards import MAX_TEXT, card_html, card_keyboard, console_button, decides
from .mentions import with_mentions

# PTB 22 warns on every RetryAfter unless time periods are opted in as timedelta; we read
# both forms (failures.retry_after_seconds), so opt in rather than spam the log.
os.environ.setdefault("PTB_TIMEDELTA", "true")

log = logging.getLogger(__name__)

Mode = Literal["polling", "webhook"]
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_UPDATE_BYTES = 1 << 20
POLL_TIMEOUT = timedelta(seconds=10)  # getUpdates long-poll length
ALLOWED_UPDATES = ["message", "callback_query"]
POLLING_LEASE = "telegram-polling"
UPDATE_TTL = timedelta(hours=24)  # Telegram keeps an unconfirmed update this long
# The rate limiter may hold a call for up to one per-group window (60 s) before sending it.
_LIMITER_GRACE = 65.0
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}$")  # what setWebhook accepts


class TelegramSurface:
    """The Telegram approval surface (a `signoff.bot.ports.Surface`)."""

    name = SURFACE
    channel_prefix = SURFACE

    def __init__(
        self,
        *,
        bot_token: str,
        chat_id: str,
        mode: Mode = "polling",
        base_url: str = "https://api.telegram.org/bot",
        base_file_url: str = "https://api.telegram.org/file/bot",
        webhook_secret: str | None = None,
        webhook_url: str | None = None,
        pending_lister: PendingLister | None = None,
        timeout: float = 10.0,
        max_per_second: float = 30.0,
        max_per_minute_per_group: float = 20.0,
        leadership: Leadership | None = None,
        replay: ReplayLedger | None = None,
    ) -> None:
        """Build the bot; nothing touches the network until the first call.

        ``max_per_second`` and ``max_per_minute_per_group`` feed `AIORateLimiter` (Telegram's
        published limits by default; 0 turns a limit off, e.g. for a local Bot API server).
        ``leadership`` decides when this node polls (default: always, a sole node);
        ``replay`` remembers the update ids handled (default: none are checked).
        """
        if not bot_token:
            raise ConfigError("telegram.bot_token is empty (ask @BotFather for one)")
        if mode not in ("polling", "webhook"):
            raise ConfigError(f'telegram.mode must be "polling" or "webhook", not {mode!r}')
        if mode == "webhook" and not webhook_secret:
            raise ConfigError('telegram.webhook_secret is required when telegram.mode = "webhook"')
        if webhook_secret is not None and not _SECRET_RE.match(webhook_secret):
            raise ConfigError("telegram.webhook_secret may use only A-Z, a-z, 0-9, _ and - "
                              "(1 to 256 characters)")
        self._token = bot_token
        logfilters.hide_token(bot_token)
        self.chat_id = str(chat_id)
        self.mode: Mode = mode
        self._secret = webhook_secret
        self._webhook_url = webhook_url
        self._timeout = timeout
        self._router = UpdateRouter(chat_id=self.chat_id, pending_lister=pending_lister)
        self._init_lock = asyncio.Lock()
        self._accepting = False
        self._leadership: Leadership = leadership or SoleLeadership()
        self._replay = replay
        self.polling = False  # this node is the one long-polling right now
        self._updates = FencedRequest(timeout=timeout)  # getUpdates only while leading
        limiter = AIORateLimiter(overall_max_rate=max_per_second,
                                 group_max_rate=max_per_minute_per_group, max_retries=0)
        builder = (
            ApplicationBuilder()
            .token(bot_token)
            .base_url(base_url)
            .base_file_url(base_file_url)
            .rate_limiter(limiter)
            .job_queue(None)
            .concurrent_updates(16)  # one slow decision must not hold up other taps
            .connect_timeout(timeout).read_timeout(timeout)
            .write_timeout(timeout).pool_timeout(timeout)
            .get_updates_request(self._updates)
        )
        if mode == "webhook":
            builder = builder.updater(None)  # updates arrive through handle_webhook
        self._app: Application[Any, Any, Any, Any, Any, Any] = builder.build()
        # Group -1 runs before the router's handlers: a replayed update stops there.
        self._app.add_handler(TypeHandler(Update, self._first_time), group=-1)
        self._app.add_handlers(self._router.handlers())
        self._app.add_error_handler(self._router.on_error)

    # --- outbound -----------------------------------------------------------------------

    def decides(self, card: ApprovalCard) -> bool:
        """Whether this card's message offers decisions (`bot.ports.ShowsCards`)."""
        return decides(card)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Send the card with its buttons to the approval chat."""
        markup = _markup(card)
        async with self._call("sendMessage", self.chat_id):
            message = await self._app.bot.send_message(
                chat_id=self.chat_id,
                text=card_html(card),
                parse_mode=ParseMode.HTML,
                reply_markup=markup,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )
        log.info("telegram_card_posted approval_id=%s chat_id=%s message_id=%s",
                 card.approval_id, self.chat_id, message.message_id)
        return CardRef(surface=SURFACE, channel=str(message.chat.id),
                       message_id=str(message.message_id))

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Edit the card in place; once decided the keyboard is gone."""
        markup = _markup(card)  # None removes the keyboard
        try:
            async with self._call("editMessageText", ref.channel):
                await self._app.bot.edit_message_text(
                    chat_id=ref.channel,
                    message_id=int(ref.message_id),
                    text=card_html(card),
                    parse_mode=ParseMode.HTML,
                    reply_markup=markup,
                    link_preview_options=LinkPreviewOptions(is_disabled=True),
                )
        except PlatformRejected as exc:
            # Telegram refuses an edit that changes nothing; the card already shows it.
            if isinstance(exc.__cause__, tg.TelegramError) and is_not_modified(exc.__cause__):
                return
            raise
        log.info("telegram_card_updated approval_id=%s chat_id=%s message_id=%s status=%s",
                 card.approval_id, ref.channel, ref.message_id, card.status)

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Send plain text to a chat (``-100123`` or ``telegram:-100123``), under a card.

        Under a card it is a reply (``reply_parameters``), which notifies the chat where an
        edit does not; ``mentions`` are listed after the text as they are written, each
        Telegram user as a ``text_mention`` of them (which notifies them too).
        """
        text, people = with_mentions(text, mentions, MAX_TEXT)
        entities = [MessageEntity(MessageEntity.TEXT_MENTION, m.offset, m.length,
                                  user=User(m.user_id, f"telegram:{m.user_id}", is_bot=False))
                    for m in people] or None
        chat = channel.removeprefix(f"{SURFACE}:") or (thread.channel if thread else "")
        reply = None
        if thread is not None and thread.channel == chat and thread.message_id.isdigit():
            reply = ReplyParameters(message_id=int(thread.message_id),
                                    allow_sending_without_reply=True)
        async with self._call("sendMessage", chat):
            # No parse_mode: the text is shown as written, nothing to escape.
            await self._app.bot.send_message(
                chat_id=chat, text=text, entities=entities, reply_parameters=reply,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )

    async def check(self) -> None:
        """Verify the token with getMe; PlatformRejected with a clear message if it is bad."""
        async with self._call("getMe") as asked:
            # Asked even when connected: a token revoked since start-up must show here;
            # but once only at start, where readying the bot has just asked it.
            if not asked:
                await self._app.bot.get_me()

    async def aclose(self) -> None:
        """Release the HTTP connections when the surface was used without `run`."""
        if not self._app.running:
            await self._app.bot.shutdown()

    # --- inbound ------------------------------------------------------------------------

    async def run(self, on_decision: DecisionHandler) -> None:
        """Take taps and commands until cancelled; stop in reverse order of starting."""
        app = self._app
        async with self._call("getMe"), self._init_lock:
            await app.initialize()  # the bot is ready already; this readies the rest
        self._router.on_decision = on_decision
        try:
            await app.start()
            try:
                log.info("telegram_running mode=%s chat_id=%s", self.mode, self.chat_id)
                if self.mode == "polling":
                    await self._poll_while_leading()
                else:
                    await self._start_webhook()
                    await asyncio.Event().wait()  # until cancelled
            finally:
                self._accepting = False
                if app.updater is not None and app.updater.running:
                    await app.updater.stop()
                if app.running:
                    await app.stop()
        finally:
            self._router.on_decision = None
            await app.shutdown()
            log.info("telegram_stopped mode=%s", self.mode)

    async def _poll_while_leading(self) -> None:
        """Long-poll while this node holds the polling lease; stand by otherwise."""
        updater = self._app.updater
        assert updater is not None  # built with an updater in polling mode
        while True:
            async with self._leadership.hold(POLLING_LEASE) as lease:
                self._updates.lease = lease
                async with self._call("getUpdates"):
                    await updater.start_polling(
                        timeout=POLL_TIMEOUT, allowed_updates=ALLOWED_UPDATES,
                        error_callback=_log_polling_error)
                self.polling = True
                log.info("telegram_polling_started chat_id=%s", self.chat_id)
                try:
                    await lease.wait_lost()
                finally:
                    self.polling = False
                    if updater.running:
                        # Confirms the offset of what was fetched, so a successor does
                        # not get it again (the ledger catches it if it does).
                        await updater.stop()
                    self._updates.lease = None
                log.warning("telegram_polling_stopped reason=leadership_lost chat_id=%s",
                            self.chat_id)

    async def _first_time(self, update: Update, context: object) -> None:
        """Stop a replayed update before any handler sees it."""
        if self._replay is None:
            return
        try:
            new = await self._replay.first_time(
                [f"telegram:update:{update.update_id}"], ttl=UPDATE_TTL)
        except StoreError as exc:
            # Unrecorded means possibly handled twice: drop it; the person taps again.
            log.warning("telegram_update_dropped update_id=%s error=%s", update.update_id, exc)
            raise ApplicationHandlerStop from exc
        if not new:
            log.info("telegram_update_replayed update_id=%s: already handled",
                     update.update_id)
            raise ApplicationHandlerStop

    async def _start_webhook(self) -> None:
        app = self._app
        self._accepting = True  # before setWebhook: Telegram may deliver at once
        if self._webhook_url:
            async with self._call("setWebhook"):
                await app.bot.set_webhook(url=self._webhook_url, secret_token=self._secret,
                                          allowed_updates=ALLOWED_UPDATES)

    def routes(self) -> tuple[Route, ...]:
        """``POST /telegram/webhook``: updates in webhook mode."""
        return (Route("POST", "/telegram/webhook", self.handle_webhook),)

    async def handle_webhook(self, request: Request) -> Response:
        """POST /telegram/webhook: check the secret, queue the update, answer at once."""
        given = request.headers.get(SECRET_HEADER, "")
        if not self._secret or not hmac.compare_digest(given.encode(), self._secret.encode()):
            return PlainTextResponse("bad or missing secret token", status_code=401)
        if not self._accepting:
            # Telegram retries non-2xx deliveries, so nothing is lost while we start.
            return PlainTextResponse("not running", status_code=503)
        body = await request.body()
        if len(body) > MAX_UPDATE_BYTES:
            return PlainTextResponse("update too large", status_code=413)
        try:
            data = json.loads(body)
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("not an update")
            update = Update.de_json(data, self._app.bot)
        # What json and de_json raise for bodies that are no update; RecursionError for
        # absurd nesting (100,000 "["), which json reports as no ValueError.
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            log.warning("telegram_webhook_malformed error=%s: not an update; refused",
                        type(exc).__name__)
            return PlainTextResponse("malformed update", status_code=400)
        await self._app.update_queue.put(update)
        return Response(status_code=200)

    # --- edge ---------------------------------------------------------------------------

    @asynccontextmanager
    async def _call(self, call: str, chat: str | None = None) -> AsyncIterator[bool]:
        """One Bot API call: a deadline, and PTB errors turned into ours; yields True when
        readying the bot asked getMe just now."""
        try:
            async with asyncio.timeout(self._timeout + _LIMITER_GRACE):
                yield await self._ensure_bot()
        except tg.InvalidToken:
            # PTB's message may quote the token; drop the cause so no log prints it.
            raise PlatformRejected(BAD_TOKEN) from None
        except tg.TelegramError as exc:
            raise translate(exc, call=call, chat=chat, token=self._token) from exc
        except TimeoutError as exc:
            raise PlatformUnavailable(f"telegram: {call} timed out") from exc

    async def _ensure_bot(self) -> bool:
        """Connect the bot's HTTP clients and learn its username (getMe) before first use;
        True when that getMe was asked now.

        Cards may be posted before `run` starts or after it stops, so every call does this;
        it is a no-op once done. The lock keeps two first calls from opening two clients.
        """
        async with self._init_lock:
            before = self._me()
            await self._app.bot.initialize()
            return self._me() is not before  # getMe answered a new User: it was asked now

    def _me(self) -> object:
        """The bot's own User from its last getMe, or None before the first."""
        try:
            return self._app.bot.bot
        except RuntimeError:  # PTB: not initialized yet
            return None


def _markup(card: ApprovalCard) -> InlineKeyboardMarkup | None:
    """The inline keyboard; PlatformRejected (final) when the id cannot fit a button."""
    try:
        rows = card_keyboard(card)
    except ValueError as exc:
        raise PlatformRejected(f"telegram: cannot post approval {card.approval_id}: {exc}") \
            from exc
    link = console_button(card)
    if link is not None:  # step-up: the console decides, the chat only links there
        return InlineKeyboardMarkup([[InlineKeyboardButton(link[0], url=link[1])]])
    if not rows:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=data) for label, data in row]
         for row in rows]
    )


def _log_polling_error(exc: tg.TelegramError) -> None:
    # PTB retries polling by itself; log the kind only (messages never carry the token).
    log.warning("telegram_polling_error error=%s", type(exc).__name__)

