"""A fake Telegram Bot API server on 127.0.0.1: real wire format, state a test can read.

    async with FakeTelegramApi() as fake:
        surface = TelegramSurface(bot_token=fake.token, chat_id="-100123",
                                  base_url=fake.base_url, base_file_url=fake.base_file_url)
        ref = await surface.post_card(card)
        fake.message("-100123", ref.message_id).labels   # ("Once", "Session", ...)

Routes are ``/bot<TOKEN>/<method>`` with form-encoded bodies (nested objects such as
reply_markup arrive as JSON strings, which is how python-telegram-bot sends them) or JSON
bodies. Implemented: getMe, deleteWebhook, setWebhook, getWebhookInfo, sendMessage,
editMessageText, editMessageReplyMarkup, answerCallbackQuery, getUpdates (long poll fed
by `push_update`, honouring ``offset``), close, logOut. Answers are
``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code", "description",
"parameters"?}`` as Telegram sends them.

Like the real Bot API, getUpdates has one consumer at a time: a second long poll while
one is open is answered 409 "Conflict: terminated by other getUpdates request" (counted
in `conflicts`); `max_consumers` is the most that were ever open at once, `offsets` the
offset of every poll in order, and `delivered` how many answers carried each update id
(an update not confirmed by a higher offset is handed out again, as Telegram does). A
poll whose client hung up (a killed process) stops counting as a consumer at once.

Knobs: a wrong token gets 401; `forbidden_chats` get 403; `fail_next` answers the next N
calls (of one method, if given) with a 5xx, or a 429 with ``retry_after``, until
`clear_failures`; `set_rate_limit` answers 429 with ``retry_after`` once a chat exceeds N
sendMessage per window. HTML text is checked the way Telegram does (unknown tags, unclosed
tags and texts over 4096 characters are a 400), and so is callback_data: anything over
64 bytes is a 400 ``BUTTON_DATA_INVALID`` and is kept in `violations`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

from tests.fakes.server import FakeServer

JSON_FIELDS = {"reply_markup", "reply_parameters", "allowed_updates", "entities",
               "link_preview_options"}
HTML_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span",
             "tg-spoiler", "a", "tg-emoji", "code", "pre", "blockquote"}
MAX_TEXT = 4096
MAX_CALLBACK_BYTES = 64


class ApiError(Exception):
    """An error answer: HTTP status, description and optional parameters."""

    def __init__(self, code: int, description: str, **parameters: Any) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters


@dataclass
class Call:
    """One Bot API request as the server saw it (recorded on arrival, status on answer)."""

    method: str
    params: dict[str, Any]
    token: str
    status: int | None = None
    host: str = ""  # the Host header: tells apart clients given different base URLs


@dataclass
class FakeMessage:
    """A message as people in the chat see it now."""

    chat_id: str
    message_id: int
    text: str  # what a person reads (HTML tags removed, entities decoded)
    html: str | None  # the raw HTML when sent with parse_mode HTML
    keyboard: list[list[dict[str, Any]]] = field(default_factory=list)
    reply_to: int | None = None
    sender: dict[str, Any] | None = None
    date: int = field(default_factory=lambda: int(time.time()))
    edits: int = 0

    @property
    def labels(self) -> tuple[str, ...]:
        """Button labels, row by row."""
        return tuple(b["text"] for row in self.keyboard for b in row)

    @property
    def buttons(self) -> list[tuple[str, str]]:
        """(label, callback_data) of every button."""
        return [(b["text"], b.get("callback_data", "")) for row in self.keyboard for b in row]


class _VisibleText(HTMLParser):
    """Telegram's HTML parse mode: allowed tags only, every tag closed; keeps the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in HTML_TAGS:
            raise ApiError(400, f"Bad Request: can't parse entities: Unsupported start tag "
                                f'"{tag}"')
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            raise ApiError(400, f'Bad Request: can\'t parse entities: Unmatched end tag "{tag}"')
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(text: str, parse_mode: str | None) -> str:
    """What a person reads of ``text`` sent with ``parse_mode`` (400 if Telegram would)."""
    if (parse_mode or "").upper() != "HTML":
        return text
    parser = _VisibleText()
    parser.feed(text)
    parser.close()
    if parser.stack:
        raise ApiError(400, "Bad Request: can't parse entities: Can't find end tag "
                            f'corresponding to start tag "{parser.stack[-1]}"')
    return "".join(parser.parts)


def chat_object(chat_id: str) -> dict[str, Any]:
    """A Chat as Telegram describes it: -100… supergroup, other negatives group, else private."""
    number = int(chat_id)
    if chat_id.startswith("-100") and len(chat_id) > 10:
        return {"id": number, "type": "supergroup", "title": "Approvals"}
    if number < 0:
        return {"id": number, "type": "group", "title": "Approvals"}
    return {"id": number, "type": "private", "first_name": "Person"}


def user(user_id: int = 42, username: str | None = "alice", first_name: str = "Alice",
         is_bot: bool = False) -> dict[str, Any]:
    """A User object."""
    data: dict[str, Any] = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
    if username:
        data["username"] = username
    return data


class FakeTelegramApi(FakeServer):
    """An async context manager running the fake Bot API in the current event loop."""

    def __init__(self, token: str = "123456:TEST-fake-token", *, bot_id: int = 900001,
                 bot_username: str = "signoff_test_bot", host: str = "127.0.0.1") -> None:
        self.token = token
        self.host = host
        self.port = 0
        self.bot = user(bot_id, bot_username, "Signoff", is_bot=True)
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, int], FakeMessage] = {}
        self.answers: dict[str, str | None] = {}  # callback query id -> toast text
        self.violations: list[str] = []  # callback_data Telegram would refuse
        self.forbidden_chats: set[str] = set()
        self.webhook: dict[str, Any] | None = None
        self.rate_limited = 0  # how many 429s were sent
        self.consumers = 0  # getUpdates long polls open right now
        self.max_consumers = 0
        self.conflicts = 0  # getUpdates answered 409 because another poll was open
        self.offsets: list[int] = []
        self.delivered: Counter[int] = Counter()  # update id -> answers that carried it
        self._fail: list[tuple[int, str | None, int]] = []  # (status, method, retry_after)
        self._limit: tuple[int, float, float] | None = None
        self._sent: dict[str, deque[float]] = {}
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._query_ids = itertools.count(7000)
        self._message_ids: dict[str, itertools.count[int]] = {}
        self._queries: set[str] = set()
        self._changed = asyncio.Condition()
        self._pushed = asyncio.Event()
        self._closed = False

    # --- lifecycle ----------------------------------------------------------------------

    shutdown_timeout = 1.0

    def app(self) -> web.Application:
        """Every Bot API method, through one dispatcher."""
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._dispatch)
        return app

    async def stop(self) -> None:
        """Stop serving; long polls return now instead of at their timeout."""
        self._closed = True
        self._pushed.set()
        await super().stop()

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url`` (python-telegram-bot appends the token)."""
        return f"http://{self.host}:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """What to pass as ``base_file_url``."""
        return f"http://{self.host}:{self.port}/file/bot"

    # --- knobs --------------------------------------------------------------------------

    def fail_next(self, count: int, *, status: int = 500, method: str | None = None,
                  retry_after: int = 1) -> None:
        """Answer the next ``count`` calls of ``method`` (default: any but getUpdates) with
        ``status``: a 5xx, or 429 "Too Many Requests" carrying ``retry_after``."""
        self._fail.extend([(status, method, retry_after)] * count)

    def clear_failures(self) -> None:
        """Forget the failures `fail_next` still had queued."""
        self._fail.clear()

    def set_rate_limit(self, count: int, window: float = 1.0, retry_after: float = 1.0) -> None:
        """Per chat: after ``count`` sendMessage within ``window`` seconds, answer 429."""
        self._limit = (count, window, retry_after)

    # --- what a test reads --------------------------------------------------------------

    def message(self, chat_id: str | int, message_id: str | int) -> FakeMessage:
        """The current state of one message."""
        return self.messages[(str(chat_id), int(message_id))]

    def chat_messages(self, chat_id: str | int, *, from_bot: bool = True) -> list[FakeMessage]:
        """Messages in a chat, oldest first (by default only those the bot sent)."""
        found = [m for (chat, _), m in self.messages.items() if chat == str(chat_id)]
        if from_bot:
            found = [m for m in found if m.sender == self.bot]
        return sorted(found, key=lambda m: m.message_id)

    def calls_to(self, method: str) -> list[Call]:
        """Recorded calls of one method (any status)."""
        return [c for c in self.calls if c.method == method]

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Return as soon as ``predicate()`` holds after some call; TimeoutError otherwise."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    async def wait_answer(self, query_id: str, timeout: float = 5.0) -> str | None:
        """Wait for answerCallbackQuery on ``query_id``; return its text."""
        await self.wait_until(lambda: query_id in self.answers, timeout)
        return self.answers[query_id]

    async def wait_call(self, method: str, count: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``method`` was answered at least ``count`` times.

        Answered, not arrived: a call is recorded on arrival and its message stored only
        when handled, so a test reading the chat right after must wait for the answer.
        getUpdates counts on arrival, since a long poll is answered only when it ends."""
        def done(c: Call) -> bool:
            return c.status is not None or c.method == "getUpdates"
        await self.wait_until(
            lambda: sum(1 for c in self.calls_to(method) if done(c)) >= count, timeout)

    # --- updates ------------------------------------------------------------------------

    def push_update(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates (wakes a waiting long poll)."""
        self._updates.append(update)
        self._pushed.set()
        self._pushed = asyncio.Event()
        return update

    def callback_update(self, chat_id: str | int, message_id: str | int, data: str,
                        sender: dict[str, Any] | None = None) -> dict[str, Any]:
        """An Update with a callback_query: ``sender`` tapped a button carrying ``data``."""
        query_id = str(next(self._query_ids))
        self._queries.add(query_id)
        return {
            "update_id": next(self._update_ids),
            "callback_query": {
                "id": query_id,
                "from": sender or user(),
                "message": self._message_json(self.message(chat_id, message_id)),
                "chat_instance": "-5836149175462733291",
                "data": data,
            },
        }

    def tap(self, chat_id: str | int, message_id: str | int, label: str,
            sender: dict[str, Any] | None = None) -> dict[str, Any]:
        """A callback_query update for the button labelled ``label`` on a message."""
        buttons = dict(self.message(chat_id, message_id).buttons)
        return self.callback_update(chat_id, message_id, buttons[label], sender)

    def command_update(self, chat_id: str | int, text: str,
                       sender: dict[str, Any] | None = None) -> dict[str, Any]:
        """An Update with a text message starting with a bot command (``/approve ab12``)."""
        chat = str(chat_id)
        command = text.split(maxsplit=1)[0]
        sent = FakeMessage(chat_id=chat, message_id=self._next_message_id(chat), text=text,
                           html=None, sender=sender or user())
        self.messages[(chat, sent.message_id)] = sent
        message = self._message_json(sent)
        message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        return {"update_id": next(self._update_ids), "message": message}

    def query_id(self, update: dict[str, Any]) -> str:
        """The callback query id inside an update built by `callback_update`/`tap`."""
        return str(update["callback_query"]["id"])

    # --- the server ---------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        method = request.match_info["method"]
        params = await _params(request)
        call = Call(method=method, params=params, token=token, host=request.host)
        self.calls.append(call)
        await self._notify()  # a long poll is "called" while it still waits
        status, body = 200, {}
        try:
            if token != self.token:
                raise ApiError(401, "Unauthorized")
            self._maybe_fail(method)
            handler = self._methods().get(method.lower())
            if handler is None:
                raise ApiError(404, "Not Found")
            if method.lower() == "getupdates":
                result = await self._consume(params, request)
            else:
                result = await handler(params)
            body = {"ok": True, "result": result}
        except ApiError as exc:
            status = exc.code
            body = {"ok": False, "error_code": exc.code, "description": exc.description}
            if exc.parameters:
                body["parameters"] = exc.parameters
        call.status = status
        await self._notify()
        return web.json_response(body, status=status)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "getme": self._get_me, "deletewebhook": self._delete_webhook,
            "setwebhook": self._set_webhook, "getwebhookinfo": self._get_webhook_info,
            "sendmessage": self._send_message, "editmessagetext": self._edit_text,
            "editmessagereplymarkup": self._edit_markup,
            "answercallbackquery": self._answer, "getupdates": self._get_updates,
            "close": self._true, "logout": self._true,
        }

    def _maybe_fail(self, method: str) -> None:
        for i, (status, only, retry_after) in enumerate(self._fail):
            if (only is None and method != "getUpdates") or only == method:
                del self._fail[i]
                if status == 429:
                    raise ApiError(429, f"Too Many Requests: retry after {retry_after:g}",
                                   retry_after=retry_after)
                raise ApiError(status, "Internal Server Error" if status == 500
                               else f"Bad Gateway ({status})")

    async def _true(self, params: dict[str, Any]) -> bool:
        return True

    async def _get_me(self, params: dict[str, Any]) -> dict[str, Any]:
        return {**self.bot, "can_join_groups": True, "can_read_all_group_messages": False,
                "supports_inline_queries": False}

    async def _set_webhook(self, params: dict[str, Any]) -> bool:
        if not str(params.get("url", "")).startswith("https://"):
            raise ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided")
        self.webhook = params
        return True

    async def _delete_webhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        if params.get("drop_pending_updates") in (True, "true", "True"):
            self._updates.clear()
        return True

    async def _get_webhook_info(self, params: dict[str, Any]) -> dict[str, Any]:
        url = self.webhook.get("url", "") if self.webhook else ""
        return {"url": url, "has_custom_certificate": False,
                "pending_update_count": len(self._updates)}

    async def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._chat(params)
        text, html = self._text(params)
        keyboard = self._keyboard(params)
        reply_to = self._reply_to(chat, params)
        self._rate_check(chat)
        sent = FakeMessage(chat_id=chat, message_id=self._next_message_id(chat), text=text,
                           html=html, keyboard=keyboard, reply_to=reply_to, sender=self.bot)
        self.messages[(chat, sent.message_id)] = sent
        return self._message_json(sent)

    async def _edit_text(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._chat(params)
        found = self._existing(chat, params)
        text, html = self._text(params)
        keyboard = self._keyboard(params)  # absent: the keyboard is removed
        if (text, html, keyboard) == (found.text, found.html, found.keyboard):
            raise ApiError(400, "Bad Request: message is not modified: specified new message "
                                "content and reply markup of the specified message are exactly "
                                "the same as a current content and reply markup of the message")
        found.text, found.html, found.keyboard = text, html, keyboard
        found.edits += 1
        return self._message_json(found, edited=True)

    async def _edit_markup(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._chat(params)
        found = self._existing(chat, params)
        keyboard = self._keyboard(params)
        if keyboard == found.keyboard:
            raise ApiError(400, "Bad Request: message is not modified")
        found.keyboard = keyboard
        found.edits += 1
        return self._message_json(found, edited=True)

    async def _answer(self, params: dict[str, Any]) -> bool:
        query_id = str(params.get("callback_query_id", ""))
        if query_id not in self._queries or query_id in self.answers:
            raise ApiError(400, "Bad Request: query is too old and response timeout expired "
                                "or query ID is invalid")
        text = params.get("text")
        if text is not None and len(text) > 200:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self.answers[query_id] = text
        return True

    async def _consume(self, params: dict[str, Any],
                       request: web.Request) -> list[dict[str, Any]]:
        """getUpdates as one consumer: 409 while another is polling."""
        if self.consumers:
            self.conflicts += 1
            raise ApiError(409, "Conflict: terminated by other getUpdates request; make sure "
                                "that only one bot instance is running")
        self.consumers += 1
        self.max_consumers = max(self.max_consumers, self.consumers)
        try:
            updates = await self._get_updates(params, request)
        finally:
            self.consumers -= 1
        self.delivered.update(u["update_id"] for u in updates)
        return updates

    async def _get_updates(self, params: dict[str, Any],
                           request: web.Request | None = None) -> list[dict[str, Any]]:
        if self.webhook:
            raise ApiError(409, "Conflict: can't use getUpdates method while webhook is "
                                "active; use deleteWebhook to delete the webhook first")
        offset = int(params.get("offset") or 0)
        self.offsets.append(offset)
        limit = int(params.get("limit") or 100)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        while True:
            if offset:  # Telegram forgets every update below a confirmed offset
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
            if self._updates or self._closed:
                return self._updates[:limit]
            left = deadline - time.monotonic()
            transport = request.transport if request is not None else None
            if left <= 0 or (request is not None and (transport is None
                                                       or transport.is_closing())):
                return []  # timed out, or nobody is listening for the answer any more
            try:
                # In slices: a client that hung up is noticed within one.
                await asyncio.wait_for(self._pushed.wait(), min(left, 0.2))
            except TimeoutError:
                continue

    # --- helpers ------------------------------------------------------------------------

    def _chat(self, params: dict[str, Any]) -> str:
        chat = str(params.get("chat_id", ""))
        if not chat.lstrip("-").isdigit():
            raise ApiError(400, "Bad Request: chat not found")
        if chat in self.forbidden_chats:
            raise ApiError(403, "Forbidden: bot was kicked from the supergroup chat")
        return chat

    def _text(self, params: dict[str, Any]) -> tuple[str, str | None]:
        raw = str(params.get("text", ""))
        text = visible_text(raw, params.get("parse_mode"))
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if len(text) > MAX_TEXT:
            raise ApiError(400, "Bad Request: message is too long")
        is_html = (params.get("parse_mode") or "").upper() == "HTML"
        return text, raw if is_html else None

    def _keyboard(self, params: dict[str, Any]) -> list[list[dict[str, Any]]]:
        markup = params.get("reply_markup") or {}
        rows: list[list[dict[str, Any]]] = markup.get("inline_keyboard", [])
        for row in rows:
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(data.encode()) <= MAX_CALLBACK_BYTES:
                    self.violations.append(data)
                    raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
        return rows

    def _reply_to(self, chat: str, params: dict[str, Any]) -> int | None:
        reply = params.get("reply_parameters") or {}
        message_id = reply.get("message_id") or params.get("reply_to_message_id")
        if message_id is None:
            return None
        if (chat, int(message_id)) not in self.messages and not reply.get(
                "allow_sending_without_reply"):
            raise ApiError(400, "Bad Request: message to be replied not found")
        return int(message_id)

    def _existing(self, chat: str, params: dict[str, Any]) -> FakeMessage:
        found = self.messages.get((chat, int(params.get("message_id") or 0)))
        if found is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        return found

    def _rate_check(self, chat: str) -> None:
        if self._limit is None:
            return
        count, window, retry_after = self._limit
        now = time.monotonic()
        sent = self._sent.setdefault(chat, deque())
        while sent and sent[0] <= now - window:
            sent.popleft()
        if len(sent) >= count:
            self.rate_limited += 1
            raise ApiError(429, f"Too Many Requests: retry after {retry_after:g}",
                           retry_after=retry_after)
        sent.append(now)

    def _next_message_id(self, chat: str) -> int:
        return next(self._message_ids.setdefault(chat, itertools.count(1)))

    def _message_json(self, message: FakeMessage, *, edited: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "message_id": message.message_id,
            "date": message.date,
            "chat": chat_object(message.chat_id),
            "from": message.sender or self.bot,
            "text": message.text,
        }
        if message.keyboard:
            data["reply_markup"] = {"inline_keyboard": message.keyboard}
        if edited:
            data["edit_date"] = int(time.time())
        if message.reply_to and (message.chat_id, message.reply_to) in self.messages:
            original = self.messages[(message.chat_id, message.reply_to)]
            data["reply_to_message"] = self._message_json(original)
        return data


async def _params(request: web.Request) -> dict[str, Any]:
    """Form or JSON body as a dict; nested objects decoded from their JSON strings."""
    if request.content_type == "application/json":
        body = await request.json()
        return body if isinstance(body, dict) else {}
    form = await request.post()
    params: dict[str, Any] = {}
    for key, value in form.items():
        text = value if isinstance(value, str) else ""
        params[key] = json.loads(text) if key in JSON_FIELDS and text else text
    return params
