"""The early-bound ports (``daemon start``, ``mcp-gate --http``) answer without Nagle's delay.

Why it matters: ``daemon start`` binds its socket itself (`bind_port`) and hands it to
uvicorn. asyncio turns on TCP_NODELAY for an accepted connection only when the listening
socket says it is TCP (``proto == IPPROTO_TCP``); a socket made as ``socket(family,
SOCK_STREAM)`` has proto 0, so every connection kept Nagle's algorithm, and a response
written in two pieces (headers, then body) waited for the client's delayed ACK: about
48 ms per request, a floor of ~20 requests/s per connection (bench/throughput.py).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from signoff.cli.daemon import bind_port
from signoff.cli.gate import HttpAddress, bind

BINDERS: dict[str, Callable[[], socket.socket]] = {
    "daemon start": lambda: bind_port("127.0.0.1", 0),
    "mcp-gate --http": lambda: bind(HttpAddress(port=0)),
}


async def _accepted_nodelay(make: Callable[[], socket.socket]) -> int:
    sock = make()
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accept, sock=sock)
    try:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(seen, 30)
        finally:
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("command", sorted(BINDERS))
def test_connections_to_the_bound_port_send_without_nagle_delay(command: str) -> None:
    assert asyncio.run(_accepted_nodelay(BINDERS[command])) != 0
