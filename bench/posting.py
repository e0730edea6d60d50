"""The benchmarks' submitter: JSON POSTs over keep-alive HTTP/1.1 at little client CPU.

Why not aiohttp (or httpx): the submitter runs on the same two cores as the daemons and
PostgreSQL, so its CPU is taken from what is measured. Measured in bench/cluster.py on
this machine: httpx ~2.6 ms of client CPU per request, aiohttp ~0.3–0.55 ms, this one
a small fraction of that — the request is formatted once per call and the response is
parsed by `httptools` (llhttp in C, the parser the daemon itself uses through uvicorn).

It does only what the benchmarks need: ``POST path`` with a JSON body (or a ``GET``) to an
``http://host:port`` base, with fixed headers (a bearer key), one connection per `Poster`
and base, reused; the answer's status and body, and when its last byte arrived
(`Poster.answered_at`, read by bench/waiters.py before its own loop gets to the answer). A connection the server closed is reopened once for the next request;
a request is never re-sent (a POST that may have reached the daemon is not repeated).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import httptools


class _Answer(asyncio.Protocol):
    """One connection: feeds what arrives to llhttp, resolves the pending request."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.pending: asyncio.Future[tuple[int, bytes]] | None = None
        self.body = bytearray()
        self.closed = False
        self.answered_at = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"bad HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError(f"connection closed before the answer: {exc}"))

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.answered_at = time.perf_counter()
        status = self.parser.get_status_code()
        body, self.body = bytes(self.body), bytearray()
        if self.pending is not None and not self.pending.done():
            self.pending.set_result((status, body))
        if not self.parser.should_keep_alive() and self.transport is not None:
            self.transport.close()

    def _fail(self, exc: Exception) -> None:
        if self.pending is not None and not self.pending.done():
            self.pending.set_exception(exc)


class Poster:
    """JSON POSTs from one submitter: one keep-alive connection per server, one request
    at a time on each (use one Poster per concurrent submitter)."""

    def __init__(self, timeout: float = 60.0, headers: dict[str, str] | None = None) -> None:
        self.timeout = timeout
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._conns: dict[tuple[str, int], _Answer] = {}
        self.answered_at = 0.0  # perf_counter() when the last answer's last byte arrived

    async def post(self, url: str, payload: Any) -> tuple[int, bytes]:
        """POST ``payload`` as JSON to ``url``; the status and body of the answer."""
        return await self.request("POST", url, payload)

    async def get(self, url: str) -> tuple[int, bytes]:
        """GET ``url``; the status and body of the answer."""
        return await self.request("GET", url)

    async def connect(self, url: str) -> None:
        """Open the connection to ``url``'s server now (before the first request)."""
        host, port, _ = _split(url)
        await self._conn(host, port)

    async def request(self, method: str, url: str, payload: Any = None) -> tuple[int, bytes]:
        """One request (a JSON body when ``payload`` is not None); status and body."""
        host, port, path = _split(url)
        body = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        kind = "" if payload is None else "Content-Type: application/json\r\n"
        conn = await self._conn(host, port)
        assert conn.transport is not None
        conn.pending = asyncio.get_running_loop().create_future()
        conn.transport.write(
            f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{self._headers}{kind}"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        try:
            async with asyncio.timeout(self.timeout):
                return await conn.pending
        finally:
            self.answered_at = conn.answered_at

    async def _conn(self, host: str, port: int) -> _Answer:
        conn = self._conns.get((host, port))
        if conn is None or conn.closed:
            _, conn = await asyncio.get_running_loop().create_connection(
                _Answer, host, port)
            self._conns[(host, port)] = conn
        return conn

    async def close(self) -> None:
        """Close every connection."""
        for conn in self._conns.values():
            if conn.transport is not None:
                conn.transport.close()
        self._conns.clear()


def _split(url: str) -> tuple[str, int, str]:
    """(host, port, path with query) of an ``http://`` URL."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname or "127.0.0.1", parts.port or 80, path
