"""A local push service (what FCM / Mozilla autopush are to a browser), for pywebpush.

    async with FakePushService() as push:
        browser = push.subscriber("phone")          # keys as a browser makes them
        ... POST /webpush/subscriptions browser.subscription ...
        message = push.received[-1]
        payload = browser.decrypt(message.body)     # aes128gcm, with the browser's keys

It records every request (headers and the encrypted body) and answers each endpoint
``/push/<name>`` with the status set in ``statuses`` (201 by default; 404 or 410 say the
subscription is gone, as real push services do). A body over `RECORD` bytes is refused
with 413, as push services do (RFC 8030 §7.2): it is recorded in ``refused`` instead. The subscriber's private key and auth
secret stay in the test: decrypting proves the daemon encrypted to the subscription.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any

import http_ece
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.fakes.server import FakeServer


def b64(data: bytes) -> str:
    """base64url without padding, as browsers write subscription keys."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class PushRequest:
    """One message as the push service received it."""

    name: str  # the endpoint's last segment
    # header names lowercased (HTTP names are case-insensitive; pywebpush sends "ttl")
    headers: dict[str, str]
    body: bytes


@dataclass
class Subscriber:
    """A browser's side of one subscription: its keys and endpoint."""

    endpoint: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def subscription(self) -> dict[str, Any]:
        """``PushSubscription.toJSON()`` as a browser sends it."""
        point = self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return {"endpoint": self.endpoint, "expirationTime": None,
                "keys": {"p256dh": b64(point), "auth": b64(self.auth)}}

    def plaintext(self, body: bytes) -> bytes:
        """The bytes of an ``aes128gcm`` message to this subscription, as the browser
        hands them to the service worker."""
        return bytes(http_ece.decrypt(body, private_key=self.key, auth_secret=self.auth,
                                      version="aes128gcm"))

    def decrypt(self, body: bytes) -> Any:
        """The JSON payload of an ``aes128gcm`` message to this subscription."""
        return json.loads(self.plaintext(body))


RECORD = 4096  # bytes of encrypted body a push service need take (RFC 8291 §4)


class FakePushService(FakeServer):
    """An async context manager serving ``POST /push/<name>`` on 127.0.0.1."""

    def __init__(self) -> None:
        self.port = 0
        self.received: list[PushRequest] = []
        self.refused: list[PushRequest] = []  # too large: 413
        self.statuses: dict[str, int] = {}

    def app(self) -> web.Application:
        """One push endpoint a subscriber name."""
        app = web.Application()
        app.router.add_post("/push/{name}", self._push)
        return app

    def subscriber(self, name: str) -> Subscriber:
        """A new browser subscription whose endpoint is ``/push/<name>`` here."""
        return Subscriber(endpoint=f"http://127.0.0.1:{self.port}/push/{name}")

    def to(self, name: str) -> list[PushRequest]:
        """The messages received for one endpoint."""
        return [r for r in self.received if r.name == name]

    async def _push(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        pushed = PushRequest(name, {k.lower(): v for k, v in request.headers.items()},
                             await request.read())
        if len(pushed.body) > RECORD:
            self.refused.append(pushed)
            return web.Response(status=413, text="payload too large")
        self.received.append(pushed)
        status = self.statuses.get(name, 201)
        return web.Response(status=status, text="" if status == 201 else "gone")
