"""A local fake of Slack: the Web API methods signoff calls and a Socket Mode websocket.

`FakeSlack` is an aiohttp server on 127.0.0.1 (a free port) that answers like
https://slack.com/api/ does — the same response shapes, error codes, ``x-oauth-scopes``
header and 429 + ``Retry-After`` — and records every call. It keeps each message per
(channel, ts) so tests can read what a card looks like now. Knobs make the next calls of a
method fail (5xx, 429, a stall, or "store, then answer 5xx" as Slack does when it fails
after saving a message), make tokens invalid or change the granted scopes. Posted message
``metadata`` is kept and ``conversations.history`` serves each channel's top-level
messages newest first, with their metadata when ``include_all_metadata`` is set.

Socket Mode: ``apps.connections.open`` hands out ``ws://127.0.0.1:<port>/socket``; on
connect the fake says ``hello``; `FakeSlack.send_socket_event` sends an envelope and waits
for the client's ack. Helpers build a real ``block_actions`` payload and sign an HTTP
request the way Slack does (``v0=HMAC_SHA256(secret, "v0:{ts}:{body}")``).

`SlackHarness` drives a `SlackSurface` against the fake in socket or http mode; it is the
`signoff.testing.SurfaceHarness` of the contract suite and the base of integration tests.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from aiohttp import WSMsgType, web
from slack_sdk.signature import SignatureVerifier
from starlette.applications import Starlette
from starlette.routing import Route

from signoff.adapters.slack import SlackSurface
from signoff.bot.ports import (
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    DecisionOutcome,
)
from signoff.runtime.models import Scope
from signoff.testing import Rendered, cancel_and_wait
from tests.fakes.server import FakeServer

TEAM_ID = "T0SIGNOFF"
BOT_USER_ID = "U0SIGNBOT"
BOT_ID = "B0SIGNBOT"
APP_ID = "A0SIGNOFF"
DEFAULT_CHANNELS = ("C0APPROVALS", "C0TEAM")

Json = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """One request the fake received."""

    method: str
    body: Json
    headers: dict[str, str]
    received_at: float = field(default_factory=time.perf_counter)  # for bench/slack.py
    peer: tuple[str, int] | None = None  # the client's address: which connection it came on

    @property
    def token(self) -> str | None:
        """The token the call carried (Authorization header or ``token`` field)."""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth.removeprefix("Bearer ")
        token = self.body.get("token")
        return token if isinstance(token, str) else None


@dataclass
class _Fault:
    count: int
    kind: str  # "status" | "ratelimited" | "stall" | "stored" (done, then a 5xx answer)
    status: int = 503
    retry_after: int = 1


@dataclass
class FakeSlack(FakeServer):
    """The fake server. Use ``async with FakeSlack() as fake`` or `start`/`stop`."""

    scopes: set[str] = field(default_factory=lambda: {"chat:write", "channels:history",
                                                       "users:read"})
    channels: set[str] = field(default_factory=lambda: set(DEFAULT_CHANNELS))
    invalid_auth: bool = False  # every bot-token call answers invalid_auth
    invalid_app_token: bool = False  # apps.connections.open answers invalid_auth
    calls: list[Call] = field(default_factory=list)
    messages: dict[tuple[str, str], Json] = field(default_factory=dict)
    acks: list[Json] = field(default_factory=list)
    _faults: dict[str, list[_Fault]] = field(default_factory=lambda: defaultdict(list))
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _pending_acks: dict[str, asyncio.Future[Json]] = field(default_factory=dict)
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    socket_connects: int = 0
    # users.info: user id -> (real name, display name); anyone else is user_not_found.
    people: dict[str, tuple[str, str]] = field(default_factory=dict)

    # -- life cycle -----------------------------------------------------------------------

    def app(self) -> web.Application:
        """The Web API methods and the Socket Mode websocket."""
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)  # conversations.history is a GET
        app.router.add_get("/socket", self._socket)
        return app

    async def stop(self) -> None:
        """Close sockets, release stalled calls and stop serving."""
        self._release.set()
        for ws in list(self._sockets):
            await ws.close()
        await super().stop()

    @property
    def api_url(self) -> str:
        """The ``base_url`` to give the Slack SDK."""
        return f"http://127.0.0.1:{self.port}/api/"

    # -- knobs ----------------------------------------------------------------------------

    def fail_next(self, method: str, count: int = 1, *, status: int = 503) -> None:
        """The next ``count`` calls of ``method`` get HTTP ``status`` (an HTML error page)."""
        self._faults[method].append(_Fault(count, "status", status=status))

    def rate_limit_next(self, method: str, count: int = 1, *, retry_after: int = 2) -> None:
        """The next ``count`` calls of ``method`` get 429 ``ratelimited`` + Retry-After."""
        self._faults[method].append(_Fault(count, "ratelimited", retry_after=retry_after))

    def fail_after_store_next(self, method: str, count: int = 1, *, status: int = 500) -> None:
        """The next ``count`` calls of ``method`` take effect, then get HTTP ``status``."""
        self._faults[method].append(_Fault(count, "stored", status=status))

    def stall_next(self, method: str, count: int = 1) -> None:
        """The next ``count`` calls of ``method`` hang until `release` or `stop`."""
        self._faults[method].append(_Fault(count, "stall"))

    def clear_faults(self, method: str) -> None:
        """Forget the faults still queued for ``method``: it answers normally again."""
        self._faults.pop(method, None)

    def release(self) -> None:
        """Let stalled calls finish."""
        self._release.set()

    # -- reading what happened -------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """Client connections open right now (a client's kept-alive ones included)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    def calls_to(self, method: str) -> list[Call]:
        """Recorded calls of one method, oldest first."""
        return [c for c in self.calls if c.method == method]

    async def wait_for_calls(self, method: str, count: int = 1, timeout: float = 5.0) -> list[Call]:
        """Wait until at least ``count`` calls of ``method`` were recorded."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.calls_to(method)) >= count)
        return self.calls_to(method)

    def message(self, channel: str, ts: str) -> Json:
        """The current state of a posted message."""
        return self.messages[(channel, ts)]

    def posted_texts(self, channel: str) -> list[str]:
        """``text`` of every chat.postMessage to ``channel``."""
        return [str(c.body.get("text", "")) for c in self.calls_to("chat.postMessage")
                if c.body.get("channel") == channel]

    def ephemeral_texts(self) -> list[str]:
        """``text`` of every chat.postEphemeral."""
        return [html.unescape(str(c.body.get("text", ""))) for c in self.calls_to("chat.postEphemeral")]

    # -- the Web API ----------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        body = await _read_body(request)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        call = Call(method, body, dict(request.headers), peer=tuple(peer) if peer else None)
        async with self._changed:
            self.calls.append(call)
            self._changed.notify_all()
        fault = self._take_fault(method)
        handler = _METHODS.get(method)
        if fault is not None and fault.kind == "stored" and handler is not None:
            handler(self, call)  # the message is saved; the answer is lost
        if fault is not None:
            if fault.kind == "stall":
                await self._release.wait()
            elif fault.kind == "ratelimited":
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                         headers={"Retry-After": str(fault.retry_after)})
            else:
                return web.Response(status=fault.status, content_type="text/html",
                                    text=f"<html><body>{fault.status} Service Unavailable</body></html>")
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
        result = handler(self, call)
        headers = {"x-oauth-scopes": ",".join(sorted(self.scopes)),
                   "x-accepted-oauth-scopes": _ACCEPTED.get(method, "")}
        return web.json_response(result, headers=headers)

    def _take_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        fault.count -= 1
        if fault.count <= 0:
            queue.pop(0)
        return fault

    def _bot_error(self, call: Call, scope: str | None = "chat:write") -> Json | None:
        token = call.token
        if not token:
            return {"ok": False, "error": "not_authed"}
        if self.invalid_auth or not token.startswith("xoxb-"):
            return {"ok": False, "error": "invalid_auth"}
        if scope and scope not in self.scopes:
            return {"ok": False, "error": "missing_scope", "needed": scope,
                    "provided": ",".join(sorted(self.scopes))}
        return None

    def _channel_error(self, channel: object) -> Json | None:
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        return None

    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._seq):06d}"

    def auth_test(self, call: Call) -> Json:
        error = self._bot_error(call, scope=None)
        if error:
            return error
        return {"ok": True, "url": "https://signoff-test.slack.com/", "team": "Signoff Test",
                "user": "signoff", "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID,
                "is_enterprise_install": False}

    def users_info(self, call: Call) -> Json:
        """``users.info`` as Slack answers it (needs users:read): the user object with
        its ``profile``; user_not_found for an id it does not know."""
        error = self._bot_error(call, scope="users:read")
        if error:
            return error
        user = str(call.body.get("user") or "")
        if user not in self.people:
            return {"ok": False, "error": "user_not_found"}
        real, display = self.people[user]
        return {"ok": True, "user": {
            "id": user, "team_id": TEAM_ID, "name": real.lower().replace(" ", "."),
            "deleted": False, "real_name": real, "tz": "Europe/Berlin", "is_bot": False,
            "updated": 1700000000,
            "profile": {"real_name": real, "display_name": display,
                        "real_name_normalized": real, "display_name_normalized": display,
                        "team": TEAM_ID}}}

    def post_message(self, call: Call) -> Json:
        body = call.body
        error = self._bot_error(call) or self._channel_error(body.get("channel"))
        if error:
            return error
        if not body.get("text") and not body.get("blocks"):
            return {"ok": False, "error": "no_text"}
        channel, ts = str(body["channel"]), self._new_ts()
        message: Json = {"type": "message", "subtype": "bot_message", "user": BOT_USER_ID,
                         "bot_id": BOT_ID, "app_id": APP_ID, "team": TEAM_ID, "ts": ts,
                         "text": body.get("text", ""), "blocks": _blocks(body.get("blocks"))}
        if body.get("thread_ts"):
            message["thread_ts"] = body["thread_ts"]
            if _true(body.get("reply_broadcast")):
                message["subtype"] = "thread_broadcast"
        metadata = _json_field(body.get("metadata"))
        if isinstance(metadata, dict):
            message["metadata"] = metadata
        self.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def update(self, call: Call) -> Json:
        body = call.body
        error = self._bot_error(call) or self._channel_error(body.get("channel"))
        if error:
            return error
        key = (str(body.get("channel")), str(body.get("ts")))
        if key not in self.messages:
            return {"ok": False, "error": "message_not_found"}
        message = self.messages[key]
        message.update(text=body.get("text", message["text"]),
                       blocks=_blocks(body.get("blocks", message["blocks"])),
                       edited={"user": BOT_USER_ID, "ts": self._new_ts()})
        return {"ok": True, "channel": key[0], "ts": key[1], "text": message["text"],
                "message": message}

    def history(self, call: Call) -> Json:
        body = call.body
        error = self._bot_error(call, scope="channels:history") or self._channel_error(
            body.get("channel"))
        if error:
            return error
        channel = str(body["channel"])
        # Top-level messages and broadcast replies, newest first: messages are kept in the
        # order they were posted, which is the order of their ts. Only the page asked for
        # is looked at, as Slack's index does: a scan and sort of the whole channel made
        # every lookup slower as bench/flow.py's channel filled, which it counted as lag.
        found = (m for (ch, _), m in reversed(self.messages.items()) if ch == channel
                 and (not m.get("thread_ts") or m.get("subtype") == "thread_broadcast"))
        start = int(body.get("cursor") or 0)
        limit = min(int(body.get("limit") or 100), 999)
        page = list(itertools.islice(found, start, start + limit + 1))
        more = len(page) > limit
        with_metadata = _true(body.get("include_all_metadata"))
        messages = [m if with_metadata else {k: v for k, v in m.items() if k != "metadata"}
                    for m in page[:limit]]
        return {"ok": True, "messages": messages, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def post_ephemeral(self, call: Call) -> Json:
        body = call.body
        error = self._bot_error(call) or self._channel_error(body.get("channel"))
        if error:
            return error
        if not body.get("user"):
            return {"ok": False, "error": "user_not_in_channel"}
        return {"ok": True, "message_ts": self._new_ts()}

    def connections_open(self, call: Call) -> Json:
        token = call.token or ""
        if not token:
            return {"ok": False, "error": "not_authed"}
        if not token.startswith("xapp-"):
            return {"ok": False, "error": "not_allowed_token_type"}
        if self.invalid_app_token:
            return {"ok": False, "error": "invalid_auth"}
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket?ticket={uuid.uuid4()}"}

    # -- Socket Mode ----------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async with self._changed:
            self._sockets.append(ws)
            self.socket_connects += 1
            self._changed.notify_all()
        await ws.send_json({"type": "hello", "num_connections": len(self._sockets),
                            "debug_info": {"host": "fake-slack", "build_number": 1,
                                           "approximate_connection_time": 18060},
                            "connection_info": {"app_id": APP_ID}})
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_socket_text(msg.data)
        finally:
            async with self._changed:
                self._sockets.remove(ws)
                self._changed.notify_all()
        return ws

    def _on_socket_text(self, data: str) -> None:
        ack = json.loads(data)
        self.acks.append(ack)
        future = self._pending_acks.pop(str(ack.get("envelope_id")), None)
        if future is not None and not future.done():
            future.set_result(ack)

    @property
    def socket_connected(self) -> bool:
        """True while a Socket Mode client is connected."""
        return bool(self._sockets)

    async def wait_socket(self, connected: bool = True, timeout: float = 5.0) -> None:
        """Wait until a client is connected (or, with ``connected=False``, until none is)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.socket_connected is connected)

    async def send_socket_disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the connected client to reconnect, as Slack does every few hours."""
        await self.wait_socket(True)
        await self._sockets[-1].send_json({"type": "disconnect", "reason": reason,
                                           "debug_info": {"host": "fake-slack"}})

    async def wait_socket_connects(self, count: int, timeout: float = 5.0) -> None:
        """Wait until ``count`` websocket connections were made in all and one is open."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(
                lambda: self.socket_connects >= count and self.socket_connected)

    async def send_socket_event(self, payload: Json, type: str = "interactive",
                                timeout: float = 5.0) -> Json:
        """Send one envelope to the connected client and return its ack."""
        await self.wait_socket(True, timeout)
        envelope_id = str(uuid.uuid4())
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._pending_acks[envelope_id] = future
        await self._sockets[-1].send_json({"envelope_id": envelope_id, "type": type,
                                           "accepts_response_payload": False,
                                           "payload": payload})
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending_acks.pop(envelope_id, None)


_METHODS = {
    "auth.test": FakeSlack.auth_test,
    "users.info": FakeSlack.users_info,
    "chat.postMessage": FakeSlack.post_message,
    "chat.update": FakeSlack.update,
    "chat.postEphemeral": FakeSlack.post_ephemeral,
    "conversations.history": FakeSlack.history,
    "apps.connections.open": FakeSlack.connections_open,
}
_ACCEPTED = {"chat.postMessage": "chat:write", "chat.update": "chat:write",
             "users.info": "users:read", "chat.postEphemeral": "chat:write", "apps.connections.open": "connections:write",
             "conversations.history": "channels:history,groups:history"}


async def _read_body(request: web.Request) -> Json:
    if request.method == "GET":
        return dict(request.query)
    if not request.can_read_body:
        return {}
    if request.content_type == "application/json":
        parsed = await request.json()
        return parsed if isinstance(parsed, dict) else {"_": parsed}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _true(value: object) -> bool:
    """A boolean argument as the SDK sends it (JSON true, or "1"/"true" in a form or query)."""
    return value is True or str(value).lower() in ("1", "true")


def _json_field(value: object) -> object:
    """An object argument: as is in a JSON body, decoded from its string in a form."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _blocks(value: object) -> list[Json]:
    # Form-encoded calls carry blocks as a JSON string, JSON calls as a list.
    if isinstance(value, str):
        value = json.loads(value)
    return list(value) if isinstance(value, list) else []


# -- reading a message the way a person sees it ------------------------------------------


def _texts(block: Json) -> list[str]:
    kind = block.get("type")
    if kind in ("header", "section") and isinstance(block.get("text"), dict):
        found = [block["text"]["text"]]
        found += [f["text"] for f in block.get("fields", [])]
        return found
    if kind == "context":
        return [e["text"] for e in block.get("elements", []) if "text" in e]
    return []


def message_text(message: Json) -> str:
    """Every visible text of a message's blocks, unescaped, joined by `` | ``."""
    parts = [t for block in message.get("blocks", []) for t in _texts(block)]
    return html.unescape(" | ".join(parts or [str(message.get("text", ""))]))


def message_buttons(message: Json) -> tuple[str, ...]:
    """Labels of the buttons in a message's actions blocks, in order."""
    return tuple(e["text"]["text"] for block in message.get("blocks", [])
                 if block.get("type") == "actions"
                 for e in block.get("elements", []) if e.get("type") == "button")


def find_button(message: Json, action_id: str) -> Json | None:
    """The button with ``action_id`` in a message, as Slack would echo it in ``actions``."""
    for block in message.get("blocks", []):
        if block.get("type") != "actions":
            continue
        for element in block.get("elements", []):
            if element.get("action_id") == action_id:
                return {**element, "block_id": block.get("block_id", "b1")}
    return None


# -- interaction payloads and signatures ----------------------------------------------------


def block_actions_payload(*, channel: str, message_ts: str, action_id: str, value: str,
                          user_id: str = "U0ALICE", username: str = "alice",
                          message: Json | None = None) -> Json:
    """A ``block_actions`` payload for a button click, shaped like Slack's documentation."""
    message = message or {"type": "message", "ts": message_ts, "text": "", "blocks": []}
    button = find_button(message, action_id) or {
        "action_id": action_id, "block_id": "signoff_decide", "type": "button", "value": value,
        "text": {"type": "plain_text", "text": action_id, "emoji": True}}
    now = f"{time.time():.6f}"
    action = {"action_id": action_id, "block_id": button.get("block_id"),
              "text": button.get("text"), "value": value, "type": "button", "action_ts": now}
    if "style" in button:
        action["style"] = button["style"]
    return {
        "type": "block_actions",
        "user": {"id": user_id, "username": username, "name": username, "team_id": TEAM_ID},
        "api_app_id": APP_ID,
        "token": "Shh_its_a_legacy_verification_token",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel,
                      "is_ephemeral": False},
        "trigger_id": f"{int(time.time())}.{TEAM_ID}.{uuid.uuid4().hex[:16]}",
        "team": {"id": TEAM_ID, "domain": "signoff-test"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "approvals"},
        "message": message,
        "state": {"values": {}},
        "response_url": f"https://hooks.slack.com/actions/{TEAM_ID}/1234567890/{uuid.uuid4().hex}",
        "actions": [action],
    }


def interaction_body(payload: Json) -> bytes:
    """The form body Slack posts for an interaction: ``payload=<url-quoted JSON>``."""
    return ("payload=" + quote(json.dumps(payload), safe="")).encode()


def sign(secret: str, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    """Headers Slack would send with ``body``: content type, timestamp and v0 signature."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": str(signature)}


def signed_interaction(secret: str, payload: Json, *,
                       timestamp: int | None = None) -> tuple[bytes, dict[str, str]]:
    """Body and headers of a signed interaction request."""
    body = interaction_body(payload)
    return body, sign(secret, body, timestamp=timestamp)


# -- harnesses: SlackSurface driven against this fake (SurfaceHarness) ------------------

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
APP_TOKEN = "xapp-1-A0SIGNOFF-1234567890-abcdef"
APPROVALS = "C0APPROVALS"


def http_app(surface: SlackSurface) -> Starlette:
    """A tiny ASGI app mounting ``handle_http`` the way the daemon's API does."""
    return Starlette(routes=[Route("/slack/events", surface.handle_http, methods=["POST"])])


@dataclass
class SlackHarness:
    """`signoff.testing.SurfaceHarness` for `SlackSurface` in either mode."""

    fake: FakeSlack
    surface: SlackSurface
    user_id: str = "U0ALICE"
    notify_channel: str = "C0TEAM"
    http: httpx.AsyncClient | None = None
    outcomes: asyncio.Queue[DecisionOutcome] = field(default_factory=asyncio.Queue)
    _task: asyncio.Task[None] | None = None

    @classmethod
    def socket(cls, fake: FakeSlack, **options: Any) -> SlackHarness:
        """A socket-mode surface; clicks arrive through the fake websocket."""
        surface = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="socket",
                               app_token=APP_TOKEN, api_url=fake.api_url, **options)
        return cls(fake=fake, surface=surface)

    @classmethod
    def http_mode(cls, fake: FakeSlack, **options: Any) -> SlackHarness:
        """An http-mode surface; clicks are signed POSTs to /slack/events."""
        surface = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                               signing_secret=SECRET, api_url=fake.api_url, **options)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=http_app(surface)),
                                   base_url="http://signoff.test")
        return cls(fake=fake, surface=surface, http=client)

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface; return once it receives clicks."""
        async def recorded(event: DecisionEvent) -> DecisionOutcome:
            try:
                outcome = await on_decision(event)
            except Exception:
                self.outcomes.put_nowait(DecisionOutcome(False, "failed", code="error"))
                raise
            self.outcomes.put_nowait(outcome)
            return outcome

        self._task = asyncio.create_task(self.surface.run(recorded))
        if self.surface.mode == "socket":
            await self.fake.wait_socket(True)
        while not self.surface.running:
            if self._task.done():
                await self._task  # surfaces why run() ended
            await asyncio.sleep(0)

    async def stop(self) -> None:
        """Cancel `run` (idempotent) and close the HTTP client."""
        await cancel_and_wait(self._task)
        self._task = None
        if self.http is not None:
            await self.http.aclose()

    def payload(self, ref: CardRef, scope: Scope, user_id: str, *, value: str | None = None,
                approval_id: str | None = None) -> Json:
        """The block_actions payload of pressing ``scope`` on a posted card."""
        message = self.fake.message(ref.channel, ref.message_id)
        button = find_button(message, f"signoff_{scope.value}")
        value = value or approval_id or (button or {}).get("value", "")
        return block_actions_payload(channel=ref.channel, message_ts=ref.message_id,
                                     action_id=f"signoff_{scope.value}", value=str(value),
                                     user_id=user_id, username=user_id.lower(), message=message)

    async def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        """POST raw bytes to /slack/events (http mode)."""
        assert self.http is not None, "post() needs an http-mode harness"
        return await self.http.post("/slack/events", content=body, headers=headers)

    async def post_signed(self, payload: Json, *, secret: str = SECRET,
                          timestamp: int | None = None) -> httpx.Response:
        """A signed interaction POST to /slack/events (http mode)."""
        body, headers = signed_interaction(secret, payload, timestamp=timestamp)
        return await self.post(body, headers)

    async def send(self, payload: Json) -> Json | None:
        """Deliver a payload natively: a signed POST (http, must answer 200) or an envelope
        over the socket (returns its ack)."""
        if self.http is None:
            return await self.fake.send_socket_event(payload)
        response = await self.post_signed(payload)
        assert response.status_code == 200, (response.status_code, response.text)
        return None

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Press a button and wait until the decision (and any ephemeral reply) is done."""
        told = len(self.fake.calls_to("chat.postEphemeral"))
        await self.send(self.payload(ref, scope, user_id))
        outcome = await asyncio.wait_for(self.outcomes.get(), 5)
        if not outcome.accepted:
            await self.fake.wait_for_calls("chat.postEphemeral", told + 1)

    async def rendered(self, ref: CardRef) -> Rendered:
        """The card as the fake holds it now."""
        message = self.fake.message(ref.channel, ref.message_id)
        return Rendered(text=message_text(message), buttons=message_buttons(message))

    async def feedback(self) -> list[str]:
        """Ephemeral replies sent to clickers."""
        return self.fake.ephemeral_texts()

    async def notifications(self, channel: str) -> list[str]:
        """Texts posted to ``channel``."""
        return [html.unescape(t) for t in self.fake.posted_texts(channel)]
