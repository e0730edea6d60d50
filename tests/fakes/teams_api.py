"""A fake Microsoft Teams on 127.0.0.1: the Bot Framework connector, the Entra ID token
endpoint and the OpenID metadata with its JWKS, in their wire formats.

    async with FakeTeams() as fake:
        surface = TeamsSurface(app_id=fake.app_id, app_password=fake.app_password,
                               conversation_id=fake.conversation_id,
                               service_url=fake.service_url,
                               openid_metadata_url=fake.openid_metadata_url,
                               token_url=fake.token_url, clock=clock)
        ref = await surface.post_card(card)
        fake.activity(ref.message_id).labels          # ("Once", "Session", ...)
        click = fake.click(ref.message_id, "Once", aad=ALICE)   # an invoke activity
        headers = {"Authorization": f"Bearer {fake.sign(click, now=clock.now())}"}

Routes: ``GET /botframework/openidconfiguration`` (metadata naming ``jwks_uri``),
``GET /botframework/keys`` (one RSA key, endorsed for `endorsements`: ``msteams``), ``POST
/<tenant>/oauth2/v2.0/token`` (client credentials, form-encoded; a wrong secret is 401
``invalid_client``), and under ``/teams/`` the connector's ``POST
v3/conversations/{id}/activities`` (a new message: 201 ``{"id"}``), ``POST
…/activities/{id}`` (a reply) and ``PUT …/activities/{id}`` (an edit). A connector call
without a token this fake issued is 401; an unknown conversation 404.

`sign` makes the JWT Bot Framework puts on an activity it sends to a bot: RS256, ``kid``
and ``x5t`` of the key, ``iss`` ``https://api.botframework.com``, ``aud`` the app id,
``serviceurl`` the activity's service URL, five minutes of ``nbf``/``exp`` around now.

Knobs: `fail_next` answers the next N connector calls with a 5xx, or a 429 with
``Retry-After``; `fail_ratio` fails that share of connector calls (a seeded random, so a
run is repeatable). A failed call changes nothing. Cards that break what Teams checks
(not an Adaptive Card, version under 1.4, an ``Action.Execute`` without verb or data) are
kept in `violations`.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes.server import FakeServer

CARD_TYPE = "application/vnd.microsoft.card.adaptive"
ISSUER = "https://api.botframework.com"
MAX_MESSAGE_BYTES = 28_000  # about what Teams accepts for one message, cards included


@dataclass
class FakeActivity:
    """One message the bot posted, as the conversation holds it now."""

    id: str
    conversation: str
    body: dict[str, Any]
    reply_to: str | None = None
    edits: int = 0

    @property
    def card(self) -> dict[str, Any]:
        """The Adaptive Card of the message ({} when it has none)."""
        for item in self.body.get("attachments") or []:
            if item.get("contentType") == CARD_TYPE:
                return dict(item.get("content") or {})
        return {}

    @property
    def text(self) -> str:
        """What a person reads: the text, or every TextBlock and TextRun of the card."""
        parts = [str(self.body.get("text") or "")]
        for item in self.card.get("body", []):
            if item.get("type") == "TextBlock":
                parts.append(str(item.get("text", "")))
            elif item.get("type") == "RichTextBlock":
                parts.append("".join(str(r.get("text", "")) for r in item.get("inlines", [])))
        return "\n".join(p for p in parts if p)

    @property
    def executes(self) -> list[dict[str, Any]]:
        """The card's Action.Execute buttons."""
        return [a for a in self.card.get("actions", []) if a.get("type") == "Action.Execute"]

    @property
    def labels(self) -> tuple[str, ...]:
        """The titles of its Action.Execute buttons, in order."""
        return tuple(str(a.get("title")) for a in self.executes)


@dataclass
class FakeTeams(FakeServer):
    """The fake server; `activities` by id, `replies` in order, `calls` as (method, path)."""

    app_id: str = "00000000-0000-0000-0000-0000000000b0"
    app_password: str = "fake-app-secret"
    tenant_id: str = "00000000-0000-0000-0000-0000000000t0"
    conversation_id: str = "19:approvals@thread.tacv2"
    host: str = "127.0.0.1"
    port: int = 0
    activities: dict[str, FakeActivity] = field(default_factory=dict)
    posted: list[str] = field(default_factory=list)  # activity ids of new messages, in order
    calls: list[tuple[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    tokens_issued: int = 0
    failures_served: int = 0
    kid: str = "fake-key-1"
    keys_down: bool = False  # the OpenID metadata answers 500
    # The channels the signing key is endorsed for; Microsoft's own keys name every
    # channel of the Bot Framework (msteams, webchat, directline, …).
    endorsements: tuple[str, ...] = ("msteams",)

    def __post_init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._tokens: set[str] = set()
        self._ids = itertools.count(1)
        self._fail: list[tuple[int, float]] = []
        self._ratio = 0.0
        self._random = random.Random(27)

    shutdown_timeout = 1.0

    def app(self) -> web.Application:
        """The Bot Framework's token, key and conversation routes."""
        app = web.Application()
        app.router.add_get("/botframework/openidconfiguration", self._metadata)
        app.router.add_get("/botframework/keys", self._keys)
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        base = "/teams/v3/conversations/{conversation}/activities"
        app.router.add_post(base, self._post)
        app.router.add_post(base + "/{activity}", self._reply)
        app.router.add_put(base + "/{activity}", self._update)
        return app

    # --- addresses ----------------------------------------------------------------------

    @property
    def base(self) -> str:
        """http://127.0.0.1:<port>"""
        return f"http://{self.host}:{self.port}"

    @property
    def service_url(self) -> str:
        """The connector's service URL, as activities name it."""
        return f"{self.base}/teams/"

    @property
    def openid_metadata_url(self) -> str:
        """The OpenID metadata document."""
        return f"{self.base}/botframework/openidconfiguration"

    @property
    def token_url(self) -> str:
        """The tenant's token endpoint."""
        return f"{self.base}/{self.tenant_id}/oauth2/v2.0/token"

    # --- knobs --------------------------------------------------------------------------

    def fail_next(self, count: int, *, status: int = 500, retry_after: float = 0.0) -> None:
        """Answer the next ``count`` connector calls with ``status`` (429: Retry-After)."""
        self._fail.extend([(status, retry_after)] * count)

    def fail_ratio(self, ratio: float, *, retry_after: float = 0.0) -> None:
        """Fail about ``ratio`` of connector calls, half 500 and half 429."""
        self._ratio = ratio
        self._ratio_retry = retry_after

    # --- what Teams would send the bot --------------------------------------------------

    def activity(self, activity_id: str) -> FakeActivity:
        """A message the bot posted."""
        return self.activities[activity_id]

    def replies(self, conversation: str | None = None) -> list[FakeActivity]:
        """Messages posted to a conversation (replies included), in order."""
        return [a for a in self.activities.values()
                if conversation is None or a.conversation == conversation]

    def click(self, activity_id: str, label: str, *, aad: str | None, name: str = "Alice",
              mri: str = "29:1alice", verb: str | None = None,
              forged: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``adaptiveCard/action`` invoke Teams sends when ``label`` is pressed (with
        ``forged``: a button of that data the card does not have)."""
        message = self.activities[activity_id]
        button = next((a for a in message.executes if a.get("title") == label), None)
        if forged is not None:
            button = {"verb": "signoff.decide", "data": forged}
        if button is None:
            raise AssertionError(f"no button {label!r} on {activity_id}: {message.labels}")
        sender: dict[str, Any] = {"id": mri, "name": name}
        if aad is not None:
            sender["aadObjectId"] = aad
        return {
            "type": "invoke", "name": "adaptiveCard/action", "id": f"f:{next(self._ids)}",
            "channelId": "msteams", "serviceUrl": self.service_url,
            "timestamp": "2026-03-14T09:27:00.000Z", "locale": "en-US", "from": sender,
            "conversation": {"id": message.conversation, "conversationType": "channel",
                             "tenantId": self.tenant_id},
            "recipient": {"id": f"28:{self.app_id}", "name": "signoff"},
            "replyToId": activity_id,
            "channelData": {"tenant": {"id": self.tenant_id}},
            "value": {"action": {"type": "Action.Execute", "title": label,
                                 "verb": verb or button.get("verb"),
                                 "data": button.get("data")}, "trigger": "manual"},
        }

    def sign(self, activity: dict[str, Any], *, now: datetime,
             lifetime: timedelta = timedelta(minutes=5), audience: str | None = None,
             issuer: str = ISSUER, key: rsa.RSAPrivateKey | None = None,
             serviceurl: str | None = None) -> str:
        """The Bearer JWT Bot Framework would send with ``activity``."""
        issued = int(now.timestamp())
        claims = {"serviceurl": serviceurl or activity.get("serviceUrl"),
                  "nbf": issued - 300, "exp": issued + int(lifetime.total_seconds()),
                  "iss": issuer, "aud": audience or self.app_id}
        return jwt.encode(claims, key or self.key, algorithm="RS256",
                          headers={"kid": self.kid, "x5t": self.kid, "typ": "JWT"})

    # --- handlers -----------------------------------------------------------------------

    async def _metadata(self, request: web.Request) -> web.Response:
        if self.keys_down:
            return web.json_response({"error": "unavailable"}, status=500)
        return web.json_response({
            "issuer": ISSUER, "authorization_endpoint": "https://invalid.botframework.com",
            "jwks_uri": f"{self.base}/botframework/keys",
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["private_key_jwt"]})

    async def _keys(self, request: web.Request) -> web.Response:
        numbers = self.key.public_key().public_numbers()
        return web.json_response({"keys": [{
            "kty": "RSA", "use": "sig", "kid": self.kid, "x5t": self.kid,
            "n": _b64(numbers.n), "e": _b64(numbers.e),
            "endorsements": list(self.endorsements)}]})

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        good = (form.get("grant_type") == "client_credentials"
                and form.get("client_id") == self.app_id
                and form.get("client_secret") == self.app_password
                and form.get("scope") == "https://api.botframework.com/.default"
                and request.match_info["tenant"] == self.tenant_id)
        if not good:
            return web.json_response({"error": "invalid_client",
                                      "error_description": "AADSTS7000215"}, status=401)
        self.tokens_issued += 1
        token = f"fake-bot-token-{self.tokens_issued}"
        self._tokens.add(token)
        return web.json_response({"token_type": "Bearer", "expires_in": 3599,
                                  "ext_expires_in": 3599, "access_token": token})

    async def _gate(self, request: web.Request) -> web.Response | None:
        """Auth, the conversation, and injected failures: an answer, or None to go on."""
        self.calls.append((request.method, request.path))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in self._tokens:
            return web.json_response({"error": {"code": "Unauthorized"}}, status=401)
        if request.match_info["conversation"] != self.conversation_id:
            return web.json_response({"error": {"code": "ConversationNotFound"}}, status=404)
        status, wait = self._failure()
        if status:
            self.failures_served += 1
            headers = {"Retry-After": f"{wait:g}"} if status == 429 else {}
            return web.json_response({"error": {"code": "ServiceError"}}, status=status,
                                     headers=headers)
        return None

    def _failure(self) -> tuple[int, float]:
        if self._fail:
            return self._fail.pop(0)
        if self._ratio and self._random.random() < self._ratio:
            return (500 if self._random.random() < 0.5 else 429), self._ratio_retry
        return 0, 0.0

    async def _post(self, request: web.Request) -> web.Response:
        return await self._store(request, reply_to=None)

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._store(request, reply_to=request.match_info["activity"])

    async def _store(self, request: web.Request, *, reply_to: str | None) -> web.Response:
        refused = await self._gate(request)
        if refused is not None:
            return refused
        body = await request.json()
        self._check(body)
        activity_id = f"1:{next(self._ids)}"
        self.activities[activity_id] = FakeActivity(
            id=activity_id, conversation=request.match_info["conversation"], body=body,
            reply_to=reply_to)
        if reply_to is None:
            self.posted.append(activity_id)
        return web.json_response({"id": activity_id}, status=201)

    async def _update(self, request: web.Request) -> web.Response:
        refused = await self._gate(request)
        if refused is not None:
            return refused
        activity = self.activities.get(request.match_info["activity"])
        if activity is None:
            return web.json_response({"error": {"code": "ActivityNotFound"}}, status=404)
        body = await request.json()
        self._check(body)
        activity.body = body
        activity.edits += 1
        return web.json_response({"id": activity.id})

    def _check(self, body: dict[str, Any]) -> None:
        """Record what Teams would refuse or render badly."""
        size = len(json.dumps(body).encode())  # as the connector measures it, \u-escaped
        if size > MAX_MESSAGE_BYTES:
            self.violations.append(f"message of {size} bytes (Teams takes {MAX_MESSAGE_BYTES})")
        if body.get("type") != "message":
            self.violations.append(f"activity type {body.get('type')!r}")
        for item in body.get("attachments") or []:
            content = item.get("content") or {}
            if item.get("contentType") != CARD_TYPE or content.get("type") != "AdaptiveCard":
                self.violations.append("attachment is not an Adaptive Card")
            elif float(content.get("version", "0")) < 1.4:
                self.violations.append(f"card version {content.get('version')}")
            for action in content.get("actions", []):
                if action.get("type") == "Action.Execute" and not (
                        action.get("verb") and isinstance(action.get("data"), dict)):
                    self.violations.append("Action.Execute without verb or data")
        for entity in body.get("entities") or []:
            if entity.get("type") == "mention" and entity.get("text") not in str(body["text"]):
                self.violations.append("mention entity not in the text")


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
