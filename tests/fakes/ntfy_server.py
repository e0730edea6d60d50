"""A local ntfy server recording publishes, in ntfy's JSON publishing format.

``POST /`` with a JSON body ``{"topic", "message", "title", "priority", "tags", "click",
"actions": [...]}`` (https://docs.ntfy.sh/publish/#publish-as-json) is answered as ntfy
does, ``200 {"id", "time", "event": "message", "topic", ...}``; a wrong ``Authorization``
(when ``token`` is set) gets ntfy's 401 ``{"code": 40101, ...}``. Its size limits are
ntfy's defaults: a JSON body of 8,192 bytes or more is 413 ``{"code": 41303}``, and a
message of 4,096 bytes or more would be an attachment, refused as on a server without
an attachment cache (400 ``{"code": 40014}``). Every publish is kept in ``published``
with its headers, for the test to read — and to press its buttons.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.server import FakeServer


@dataclass(frozen=True)
class Publish:
    """One message as the server received it."""

    headers: dict[str, str]
    body: dict[str, Any]


MESSAGE_BYTES = 4096  # ntfy's message-size-limit; a message that long is an attachment
JSON_BYTES = 2 * MESSAGE_BYTES  # a JSON publish, "2x to account for JSON format overhead"


class FakeNtfy(FakeServer):
    """An async context manager serving ntfy's JSON publish at ``url``."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.port = 0
        self.published: list[Publish] = []

    def app(self) -> web.Application:
        """ntfy's JSON publish."""
        app = web.Application()
        app.router.add_post("/", self._publish)
        return app

    @property
    def url(self) -> str:
        """The server's base URL (``[ntfy] url``)."""
        return f"http://127.0.0.1:{self.port}"

    async def _publish(self, request: web.Request) -> web.Response:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"code": 40101, "http": 401,
                                      "error": "unauthorized"}, status=401)
        raw = await request.read()
        if len(raw) >= JSON_BYTES:  # util.Peek: "reached" when it read exactly that many
            return web.json_response({"code": 41303, "http": 413,
                                      "error": "JSON body too large"}, status=413)
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"code": 40024, "http": 400,
                                      "error": "invalid request: JSON body invalid"},
                                     status=400)
        if len(str(body.get("message", "")).encode()) >= MESSAGE_BYTES:
            return web.json_response({"code": 40014, "http": 400,
                                      "error": "invalid request: attachments not allowed"},
                                     status=400)
        self.published.append(Publish(dict(request.headers), body))
        return web.json_response({"id": secrets.token_hex(6), "time": 0, "event": "message",
                                  "topic": body.get("topic"), "message": body.get("message")})
