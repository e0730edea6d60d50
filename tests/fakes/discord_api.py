"""A fake Discord REST API on 127.0.0.1: real wire format, state a test can read, and
interactions signed the way Discord signs them.

    async with FakeDiscord() as fake:
        surface = DiscordSurface(application_id=fake.application_id,
                                 public_key=fake.public_key, bot_token=fake.bot_token,
                                 channel_id=APPROVALS, api_base=fake.api_base)
        ref = await surface.post_card(card)
        fake.message(ref.channel, ref.message_id).labels   # ("Once", "Session", ...)
        body, headers = fake.click(ref.channel, ref.message_id, "Once", user_id="4242")

Routes under ``/api/v10``: ``GET /users/@me``, ``GET /channels/{id}``, ``GET`` and ``POST
/channels/{id}/messages`` (a post with ``enforce_nonce`` and a nonce seen before returns
the first message, as Discord does), ``PATCH /channels/{id}/messages/{id}``, ``GET
/channels/{id}/messages/{id}`` and ``PATCH /webhooks/{app}/{token}/messages/@original``
(an interaction's reply; authorized by its token, not the bot's). Bot routes need
``Authorization: Bot <token>`` (401 otherwise). Errors are Discord's JSON: ``{"message",
"code"}``, and for 429 ``{"message", "retry_after", "global"}`` with the ``Retry-After``,
``X-RateLimit-Global`` and ``X-RateLimit-Scope`` headers.

Messages are checked as Discord checks them (a 400 with code 50035 and kept in
`violations`): content over 2000 characters, an empty message, more than 10 embeds, an
embed title over 256 or description over 4096, more than 5 rows or 5 buttons a row, a
button without a custom_id (or a link button without a url), a custom_id over 100
characters or used twice in one message, a label over 80, and ``allowed_mentions``
naming ``users`` both in ``parse`` and as a list; so is a User-Agent that is not
``DiscordBot (url, version)``, which Discord asks of every bot.

Knobs: `fail_next` answers the next N calls (of one route kind, if given) with a 5xx or a
429 carrying ``retry_after`` (per route or global); `fail_after_store_next` does a call
and still answers 500; `forget_nonces` ends the nonces' window; `fail_ratio` fails that
share of bot calls, chosen by a seeded random, BEFORE doing anything (as a proxy in front of Discord
would). Interactions are signed with the fake's own Ed25519 key: ``X-Signature-Ed25519``
is the hex signature of ``X-Signature-Timestamp`` + body, as Discord sends them.
`DiscordHarness` drives a surface on the fake the way members and Discord would.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from signoff.adapters.discord import DiscordSurface
from signoff.bot.ports import ApprovalCard, CardRef, DecisionHandler
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Scope
from signoff.testing import BUTTON_LABELS, Rendered, cancel_and_wait, route_client
from tests.fakes.server import FakeServer

API = "/api/v10"
_UNESCAPE = re.compile(r"\\([\\*_~`|<>\[\]#])")
APPROVALS = "1100000000000000001"  # the approvals channel
TEAM = "1100000000000000002"  # another channel for notifications


class ApiError(Exception):
    """An error answer: status, Discord's error code and message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Call:
    """One request as the server saw it."""

    method: str
    route: str  # "messages.create", "messages.edit", "users.me", "webhook.edit", ...
    path: str
    body: Any
    status: int | None = None


@dataclass
class FakeMessage:
    """A message as people in the channel see it now."""

    id: str
    channel_id: str
    content: str
    embeds: list[dict[str, Any]]
    components: list[dict[str, Any]]
    allowed_mentions: dict[str, Any] | None
    message_reference: dict[str, Any] | None
    author: dict[str, Any]
    edits: int = 0

    @property
    def text(self) -> str:
        """What a person reads: content, then each embed's title and description, with
        markdown escapes shown as the characters they are."""
        parts = [self.content]
        for embed in self.embeds:
            parts += [embed.get("title", ""), embed.get("description", "")]
        return _UNESCAPE.sub(r"\1", "\n".join(p for p in parts if p))

    @property
    def buttons(self) -> list[dict[str, Any]]:
        """Every button, row by row."""
        return [c for row in self.components for c in row.get("components", [])]

    @property
    def labels(self) -> tuple[str, ...]:
        """Button labels, row by row."""
        return tuple(b.get("label", "") for b in self.buttons)

    @property
    def pinged(self) -> list[str]:
        """The user ids Discord would notify: mentioned in the content AND allowed."""
        allowed = self.allowed_mentions or {"parse": ["users", "roles", "everyone"]}
        written = re.findall(r"<@!?(\d+)>", self.content)
        if "users" in allowed.get("parse", []):
            return written
        return [u for u in written if u in allowed.get("users", [])]

    def json(self) -> dict[str, Any]:
        """The message object as Discord returns it."""
        data: dict[str, Any] = {
            "id": self.id, "channel_id": self.channel_id, "type": 19 if self.message_reference
            else 0, "content": self.content, "embeds": self.embeds,
            "components": self.components, "author": self.author, "mentions": [],
            "mention_roles": [], "mention_everyone": False, "pinned": False, "tts": False,
            "flags": 0, "timestamp": datetime.now(UTC).isoformat(),
            "edited_timestamp": datetime.now(UTC).isoformat() if self.edits else None}
        if self.message_reference:
            data["message_reference"] = {"type": 0, **self.message_reference}
        return data


def discord_user(user_id: str, username: str = "alice", global_name: str | None = "Alice",
                 *, bot: bool = False) -> dict[str, Any]:
    """A user object as Discord sends it."""
    user: dict[str, Any] = {"id": user_id, "username": username, "global_name": global_name,
                            "discriminator": "0", "avatar": None, "public_flags": 0}
    if bot:
        user["bot"] = True
    return user


class FakeDiscord(FakeServer):
    """An async context manager running the fake REST API in the current event loop."""

    def __init__(self, *, bot_token: str = "MTEwMDAwMDAwMDAwMDAwMDk5OQ.fake.token",
                 application_id: str = "1100000000000000999", host: str = "127.0.0.1",
                 channels: tuple[str, ...] = (APPROVALS, TEAM)) -> None:
        self.bot_token = bot_token
        self.application_id = application_id
        self.host, self.port = host, 0
        self.bot = discord_user(application_id, "signoff", None, bot=True)
        self.channels = set(channels)
        self.guild_id = "1100000000000000100"
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], FakeMessage] = {}
        self.replies: dict[str, dict[str, Any]] = {}  # interaction token -> its reply edit
        self.violations: list[str] = []
        self.rate_limited = 0
        self._key = Ed25519PrivateKey.generate()
        self._fail: list[tuple[int, str | None, float, bool]] = []
        self._ratio: tuple[float, random.Random] | None = None
        self._fail_after: list[tuple[str, int]] = []
        self._nonces: dict[tuple[str, str], FakeMessage] = {}  # (channel, nonce) -> message
        self._ids = itertools.count(1_200_000_000_000_000_001)
        self._changed = asyncio.Condition()

    shutdown_timeout = 1.0

    def app(self) -> web.Application:
        """Every REST route, through one dispatcher."""
        app = web.Application()
        app.router.add_route("*", API + "/{path:.*}", self._dispatch)
        return app

    @property
    def api_base(self) -> str:
        """What to pass as ``api_base``."""
        return f"http://{self.host}:{self.port}{API}"

    @property
    def public_key(self) -> str:
        """The application's public key, as the Developer Portal shows it (64 hex)."""
        return self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    # --- knobs --------------------------------------------------------------------------

    def fail_next(self, count: int, *, status: int = 500, route: str | None = None,
                  retry_after: float = 1.0, is_global: bool = False) -> None:
        """Answer the next ``count`` bot calls (of ``route``, if given) with ``status``."""
        self._fail.extend([(status, route, retry_after, is_global)] * count)

    def fail_after_store_next(self, route: str, *, status: int = 500) -> None:
        """Do the next call of ``route``, then answer ``status`` anyway (an ambiguous
        failure: Discord kept the message, the caller cannot know)."""
        self._fail_after.append((route, status))

    def forget_nonces(self) -> None:
        """Discord keeps nonces for a few minutes: pretend those minutes have passed."""
        self._nonces.clear()

    def fail_ratio(self, ratio: float, *, seed: int = 7, retry_after: float = 1.0) -> None:
        """Fail that share of bot calls before doing anything: half 500, half 429."""
        self._ratio = (ratio, random.Random(seed))
        self._ratio_retry = retry_after

    # --- what a test reads --------------------------------------------------------------

    def message(self, channel_id: str, message_id: str) -> FakeMessage:
        """The current state of one message."""
        return self.messages[(str(channel_id), str(message_id))]

    def channel_messages(self, channel_id: str) -> list[FakeMessage]:
        """Messages in a channel, oldest first."""
        return sorted((m for (c, _), m in self.messages.items() if c == str(channel_id)),
                      key=lambda m: int(m.id))

    def calls_to(self, route: str) -> list[Call]:
        """Recorded calls of one route kind (any status)."""
        return [c for c in self.calls if c.route == route]

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Return as soon as ``predicate()`` holds after some call; TimeoutError otherwise."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    # --- interactions -------------------------------------------------------------------

    def sign(self, body: bytes, timestamp: int) -> dict[str, str]:
        """The headers Discord sends with ``body``: Ed25519 over timestamp + body."""
        signature = self._key.sign(str(timestamp).encode() + body)
        return {"X-Signature-Ed25519": signature.hex(),
                "X-Signature-Timestamp": str(timestamp), "Content-Type": "application/json"}

    def interaction(self, kind: int, **fields: Any) -> dict[str, Any]:
        """An interaction object of type ``kind`` with a fresh id and token."""
        return {"id": str(next(self._ids)), "application_id": self.application_id,
                "type": kind, "token": "aW50ZXJhY3Rpb246" + secrets.token_urlsafe(48),
                "version": 1, "locale": "en-US", "entitlements": [],
                "authorizing_integration_owners": {"0": self.guild_id}, **fields}

    def click(self, channel_id: str, message_id: str, label: str, *, user_id: str = "4242",
              username: str = "alice", global_name: str | None = "Alice",
              nick: str | None = None) -> dict[str, Any]:
        """The MESSAGE_COMPONENT interaction of a member clicking the button ``label``."""
        message = self.message(channel_id, message_id)
        [button] = [b for b in message.buttons if b.get("label") == label]
        return self.forged_click(channel_id, message_id, button["custom_id"], user_id=user_id,
                                 username=username, global_name=global_name, nick=nick)

    def forged_click(self, channel_id: str, message_id: str, custom_id: str, *,
                     user_id: str = "4242", username: str = "alice",
                     global_name: str | None = "Alice", nick: str | None = None
                     ) -> dict[str, Any]:
        """The interaction of a click carrying ``custom_id`` on a message, whether or not
        the message has that button (an old client, a crafted request)."""
        message = self.message(channel_id, message_id)
        member = {"user": discord_user(user_id, username, global_name), "nick": nick,
                  "roles": [], "joined_at": "2025-01-02T03:04:05.000000+00:00",
                  "deaf": False, "mute": False, "flags": 0, "permissions": "2248473465835073"}
        return self.interaction(
            3, guild_id=self.guild_id, channel_id=channel_id,
            channel={"id": channel_id, "type": 0, "guild_id": self.guild_id},
            member=member, message=message.json(), app_permissions="2248473465835073",
            data={"custom_id": custom_id, "component_type": 2})

    # --- the server ---------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        body = await request.json() if request.can_read_body else None
        route, handler, args = self._route(request.method, path)
        if route == "messages.list":
            body = dict(request.query)
        call = Call(request.method, route, path, body)
        self.calls.append(call)
        status, headers, answer = 200, {}, None
        try:
            if not request.headers.get("User-Agent", "").startswith("DiscordBot ("):
                self.violations.append(f"User-Agent is not 'DiscordBot (url, version)': {path}")
            if route != "webhook.edit":
                if request.headers.get("Authorization") != f"Bot {self.bot_token}":
                    raise ApiError(401, 0, "401: Unauthorized")
                self._maybe_fail(route, headers)
            answer = handler(body, *args)
            self._maybe_fail_after(route)
        except ApiError as exc:
            status = exc.status
            answer = ({"message": exc.message, "retry_after": headers.pop("_retry"),
                       "global": headers["X-RateLimit-Global"] == "true"}
                      if status == 429 else {"message": exc.message, "code": exc.code})
        call.status = status
        async with self._changed:
            self._changed.notify_all()
        if answer is None:
            return web.Response(status=204, headers=headers)
        return web.json_response(answer, status=status, headers=headers)

    def _route(self, method: str, path: str) -> tuple[str, Callable[..., Any], tuple[str, ...]]:
        table: list[tuple[str, str, str, Callable[..., Any]]] = [
            ("GET", r"/users/@me", "users.me", lambda body: self.bot),
            ("GET", r"/channels/(\d+)", "channels.get", self._channel),
            ("POST", r"/channels/(\d+)/messages", "messages.create", self._create),
            ("PATCH", r"/channels/(\d+)/messages/(\d+)", "messages.edit", self._edit),
            ("GET", r"/channels/(\d+)/messages", "messages.list", self._list),
            ("GET", r"/channels/(\d+)/messages/(\d+)", "messages.get",
             lambda body, c, m: self._existing(c, m).json()),
            ("PATCH", r"/webhooks/(\d+)/([^/]+)/messages/@original", "webhook.edit",
             self._reply_edit),
        ]
        for verb, pattern, name, handler in table:
            found = re.fullmatch(pattern, path)
            if verb == method and found:
                return name, handler, found.groups()
        return "unknown", self._not_found, ()

    def _not_found(self, body: Any, *args: str) -> Any:
        raise ApiError(404, 0, "404: Not Found")

    def _maybe_fail(self, route: str, headers: dict[str, Any]) -> None:
        for i, (status, only, retry_after, is_global) in enumerate(self._fail):
            if only is None or only == route:
                del self._fail[i]
                self._raise(status, retry_after, is_global, headers)
        if self._ratio is not None:
            ratio, rng = self._ratio
            roll = rng.random()
            if roll < ratio:
                self._raise(500 if roll < ratio / 2 else 429, self._ratio_retry, False, headers)

    def _raise(self, status: int, retry_after: float, is_global: bool,
               headers: dict[str, Any]) -> None:
        if status != 429:
            raise ApiError(status, 0, f"{status}: Internal Server Error")
        self.rate_limited += 1
        headers.update({"Retry-After": str(max(1, round(retry_after))),
                        "X-RateLimit-Global": "true" if is_global else "false",
                        "X-RateLimit-Scope": "global" if is_global else "user",
                        "_retry": retry_after})
        raise ApiError(429, 0, "You are being rate limited.")

    def _maybe_fail_after(self, route: str) -> None:
        for i, (only, status) in enumerate(self._fail_after):
            if only == route:
                del self._fail_after[i]
                raise ApiError(status, 0, f"{status}: Internal Server Error")

    def _list(self, query: dict[str, str], channel_id: str) -> list[dict[str, Any]]:
        """Newest first, ``limit`` (1-100) of them, older than ``before`` if given."""
        self._channel(query, channel_id)
        limit = int(query.get("limit", "50"))
        if not 1 <= limit <= 100:
            raise ApiError(400, 50035, "Invalid Form Body: limit")
        before = int(query.get("before", str(1 << 64)))
        found = [m for m in reversed(self.channel_messages(channel_id)) if int(m.id) < before]
        return [m.json() for m in found[:limit]]

    def _channel(self, body: Any, channel_id: str) -> dict[str, Any]:
        if channel_id not in self.channels:
            raise ApiError(404, 10003, "Unknown Channel")
        return {"id": channel_id, "type": 0, "guild_id": self.guild_id, "name": "approvals"}

    def _create(self, body: Any, channel_id: str) -> dict[str, Any]:
        self._channel(body, channel_id)
        self._validate(body, new=True)
        nonce = body.get("nonce")
        if nonce is not None and len(str(nonce)) > 25:
            self.violations.append(f"nonce over 25 characters: {nonce}")
            raise ApiError(400, 50035, "Invalid Form Body: nonce")
        if body.get("enforce_nonce") and (channel_id, str(nonce)) in self._nonces:
            return self._nonces[(channel_id, str(nonce))].json()  # as Discord: the first one
        reference = body.get("message_reference")
        if reference and reference.get("fail_if_not_exists", True) is not False:
            self._existing(reference.get("channel_id", channel_id), reference["message_id"])
        message = FakeMessage(
            id=str(next(self._ids)), channel_id=channel_id, content=body.get("content", ""),
            embeds=body.get("embeds", []), components=body.get("components", []),
            allowed_mentions=body.get("allowed_mentions"), message_reference=reference,
            author=self.bot)
        self.messages[(channel_id, message.id)] = message
        if nonce is not None:
            self._nonces[(channel_id, str(nonce))] = message
        return message.json()

    def _edit(self, body: Any, channel_id: str, message_id: str) -> dict[str, Any]:
        message = self._existing(channel_id, message_id)
        self._validate(body, new=False)
        for key in ("content", "embeds", "components", "allowed_mentions"):
            if key in body:
                setattr(message, key, body[key])
        message.edits += 1
        return message.json()

    def _reply_edit(self, body: Any, application_id: str, token: str) -> dict[str, Any]:
        if application_id != self.application_id:
            raise ApiError(404, 10015, "Unknown Webhook")
        self.replies[token] = body
        return {"id": str(next(self._ids)), "content": body.get("content", ""), "flags": 64}

    def _existing(self, channel_id: str, message_id: str) -> FakeMessage:
        found = self.messages.get((channel_id, message_id))
        if found is None:
            raise ApiError(404, 10008, "Unknown Message")
        return found

    def _validate(self, body: Any, *, new: bool) -> None:
        problems = list(message_problems(body, new=new))
        if problems:
            self.violations.extend(problems)
            raise ApiError(400, 50035, "Invalid Form Body: " + "; ".join(problems))


def message_problems(body: Any, *, new: bool) -> list[str]:
    """What Discord would refuse in a message body (create or edit)."""
    if not isinstance(body, dict):
        return ["body is not an object"]
    found: list[str] = []
    content, embeds = body.get("content") or "", body.get("embeds") or []
    rows = body.get("components") or []
    if len(content) > 2000:
        found.append("content: over 2000 characters")
    if new and not (content or embeds or rows):
        found.append("Cannot send an empty message")
    if len(embeds) > 10:
        found.append("embeds: more than 10")
    for embed in embeds:
        if len(embed.get("title", "")) > 256 or len(embed.get("description", "")) > 4096:
            found.append("embed: title over 256 or description over 4096")
    found += _component_problems(rows)
    mentions = body.get("allowed_mentions")
    if mentions and "users" in mentions.get("parse", []) and mentions.get("users"):
        found.append("allowed_mentions: users both parsed and listed")
    return found


def _component_problems(rows: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    if len(rows) > 5:
        found.append("components: more than 5 rows")
    for row in rows:
        buttons = row.get("components", [])
        if row.get("type") != 1 or not 1 <= len(buttons) <= 5:
            found.append("components: a row must be type 1 with 1 to 5 buttons")
        for button in buttons:
            link = button.get("style") == 5
            custom_id = button.get("custom_id")
            if link != ("url" in button) or link == (custom_id is not None):
                found.append("button: a link button has a url, any other a custom_id")
            if custom_id is not None and (len(custom_id) > 100 or custom_id in seen):
                found.append(f"button: custom_id over 100 characters or repeated: {custom_id}")
            seen.add(custom_id or "")
            if len(button.get("label", "")) > 80:
                found.append("button: label over 80 characters")
    return found


@dataclass
class DiscordHarness:
    """`SurfaceHarness` for DiscordSurface against `FakeDiscord`."""

    fake: FakeDiscord
    surface: DiscordSurface
    client: httpx.AsyncClient
    clock: FakeClock
    user_id: str = "4242"
    notify_channel: str = TEAM
    answers: list[dict[str, Any]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    @classmethod
    @asynccontextmanager
    async def on(cls, fake: FakeDiscord, **options: Any) -> AsyncIterator[DiscordHarness]:
        """A DiscordSurface on ``fake`` (with a fake clock), a client for its route; on
        exit everything is stopped and no message Discord would refuse was sent."""
        clock = FakeClock()
        options = {"bot_token": fake.bot_token, "channel_id": APPROVALS, **options}
        surface = DiscordSurface(application_id=fake.application_id,
                                 public_key=fake.public_key, api_base=fake.api_base,
                                 clock=clock, timeout=5.0, **options)
        async with route_client(surface) as client:
            harness = cls(fake=fake, surface=surface, client=client, clock=clock)
            try:
                yield harness
            finally:
                await harness.stop()
                await surface.aclose()
        assert fake.violations == []

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface; it takes clicks as soon as `run` has begun."""
        self._task = asyncio.create_task(self.surface.run(on_decision))
        while not self.surface.running:
            await asyncio.sleep(0)

    async def stop(self) -> None:
        """Cancel run() and wait for it."""
        await cancel_and_wait(self._task)
        self._task = None

    async def post(self, interaction: dict[str, Any]) -> httpx.Response:
        """Send one interaction, signed as Discord signs it, now by the surface's clock."""
        body = encode(interaction)
        headers = self.fake.sign(body, int(self.clock.now().timestamp()))
        return await self.client.post("/discord/interactions", content=body, headers=headers)

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Click the button as the member would; return once Discord got its answer."""
        interaction = self.fake.click(ref.channel, ref.message_id, BUTTON_LABELS[scope],
                                      user_id=user_id)
        response = await self.post(interaction)
        assert response.status_code == 200, response.text
        self.answers.append(response.json())

    async def rendered(self, ref: CardRef) -> Rendered:
        """Text and buttons of the message as the fake holds it."""
        message = self.fake.message(ref.channel, ref.message_id)
        return Rendered(text=message.text, buttons=message.labels)

    async def feedback(self) -> list[str]:
        """What clickers were shown: ephemeral answers and edited deferred replies."""
        shown = [a["data"]["content"] for a in self.answers
                 if a["type"] == 4 and a["data"].get("flags") == 64]
        return shown + [r.get("content", "") for r in self.fake.replies.values()]

    async def notifications(self, channel: str) -> list[str]:
        """Texts the bot sent to ``channel``."""
        return [m.text for m in self.fake.channel_messages(channel)]


def encode(payload: dict[str, Any]) -> bytes:
    """An interaction as the bytes Discord sends (compact JSON)."""
    return json.dumps(payload, separators=(",", ":")).encode()
