"""A tiny aiohttp server on 127.0.0.1 for the HTTP tools; it records every request.

    async with HttpEcho() as echo:
        await tool.run({"url": echo.url("/text")}, ctx)
        assert echo.requests[-1].path == "/text"

Routes:
    GET  /text            200 "hello from echo" (text/plain, with a Set-Cookie header)
    GET  /big?size=N      200, N bytes of "x"
    GET  /redirect        302 to /text (or to ?to=URL)
    GET  /slow?seconds=S  sleeps S seconds, then 200
    *    /status/{code}   answers that status with body "status {code}"
    POST /hook            records the JSON body, 200 {"ok": true}
    POST /endless         records it, 200 with a body that never ends (until the client
                          goes away)
    POST /held?key=K      records it, holds the answer until `release` (K), then 200 — a
                          slow sink: the request has arrived, its answer has not
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.server import FakeServer


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class HttpEcho(FakeServer):
    """An async context manager running the echo app in the current event loop."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.requests: list[RecordedRequest] = []
        self._released: dict[str, asyncio.Event] = {}

    def app(self) -> web.Application:
        """The echo routes, each request recorded first."""
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/text", self._text)
        app.router.add_get("/big", self._big)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/slow", self._slow)
        app.router.add_route("*", "/status/{code}", self._status)
        app.router.add_post("/hook", self._hook)
        app.router.add_post("/endless", self._endless)
        app.router.add_post("/held", self._held)
        return app

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` on this server."""
        return f"http://{self.host}:{self.port}{path}"

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            RecordedRequest(request.method, request.path, dict(request.headers), body)
        )
        response: web.StreamResponse = await handler(request)
        return response

    async def _text(self, request: web.Request) -> web.Response:
        response = web.Response(text="hello from echo", content_type="text/plain")
        response.set_cookie("session", "secret")
        return response

    async def _big(self, request: web.Request) -> web.Response:
        return web.Response(text="x" * int(request.query.get("size", "1000")))

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query.get("to", "/text"))

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("seconds", "5")))
        return web.Response(text="slow")

    async def _status(self, request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"status {code}")

    async def _hook(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        chunk = b"y" * 65536
        while True:  # ends when the client closes the connection (a write then fails)
            await response.write(chunk)

    def release(self, key: str) -> None:
        """Let the held requests of ``key`` (and later ones) be answered (on the loop)."""
        self._released.setdefault(key, asyncio.Event()).set()

    def release_all(self) -> None:
        """Answer every held request (before the server stops: it waits for them)."""
        for event in self._released.values():
            event.set()

    async def _held(self, request: web.Request) -> web.Response:
        key = request.query.get("key", "")
        await self._released.setdefault(key, asyncio.Event()).wait()
        return web.json_response({"ok": True, "held": key})
