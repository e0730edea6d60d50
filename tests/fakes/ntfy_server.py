"""A local ntfy server recording publishes, in ntfy's JSON publishing format.

``POST /`` with a JSON body ``{"topic", "message", "title", "priority", "tags", "click",
"actions": [...]}`` (https://docs.ntfy.sh/publish/#publish-as-json) is answered as ntfy
does, ``200 {"id", "time", "event": "message", "topic", ...}``; a wrong ``Authorization``
(when ``token`` is set) gets ntfy's 401 ``{"code": 40101, ...}``. Every publish is kept in
``published`` with its headers, for the test to read — and to press its buttons.
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
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response({"code": 40024, "http": 400,
                                      "error": "invalid request: JSON body invalid"},
                                     status=400)
        self.published.append(Publish(dict(request.headers), body))
        return web.json_response({"id": secrets.token_hex(6), "time": 0, "event": "message",
                                  "topic": body.get("topic"), "message": body.get("message")})
