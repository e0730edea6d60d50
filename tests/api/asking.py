"""What the tests of the processes that ask a daemon on an agent's behalf share
(`signoff mcp-gate` over stdio and ``--http``, `mcp-permission`, `claude-hook`): the
agent's key, the requests waiting for a person, that person's answer, a withdrawal seen
through, and an MCP client session over stdio. The daemon itself is the ``daemon``
fixture of tests/api/conftest.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.api.helpers import BOB_KEY, Running, eventually

AGENT_KEY = BOB_KEY  # the agent asks with its own key; a person (the admin) decides

Item = dict[str, Any]


async def pending(node: Running) -> list[Item]:
    """The requests waiting for a person now, as the admin lists them."""
    async with node.client() as admin:
        return list((await admin.get("/approvals", params={"status": "pending"})
                     ).json()["items"])


async def asked(node: Running, count: int = 1) -> list[Item]:
    """The waiting requests, once there are at least ``count`` of them."""
    items: list[Item] = []

    async def found() -> bool:
        items[:] = await pending(node)
        return len(items) >= count

    await eventually(found, 60, "the request")
    return items


async def decide(node: Running, approval_id: str, verb: str,
                 body: dict[str, Any] | None = None) -> None:
    """The admin answers one request (``verb`` approve or deny)."""
    async with node.client() as admin:
        answer = await admin.post(f"/approvals/{approval_id}/{verb}", json=body or {})
    assert answer.status_code == 200, answer.text


async def decide_first(node: Running, verb: str, body: dict[str, Any] | None = None) -> Item:
    """Wait until someone asks, answer the first waiting request, return it."""
    item = (await asked(node))[0]
    await decide(node, item["id"], verb, body)
    return item


async def withdrawn(node: Running, approval_id: str) -> None:
    """Wait until the request reads withdrawn."""
    async def seen() -> bool:
        async with node.client() as admin:
            status = (await admin.get(f"/v1/approvals/{approval_id}")).json()["status"]
        return bool(status == "withdrawn")

    await eventually(seen, 30, "the withdrawal")


async def cancelled_and_withdrawn(node: Running, call: asyncio.Task[Any],
                                  approval_id: str) -> None:
    """Cancel the client's waiting call, then wait until its request reads withdrawn."""
    call.cancel()
    with contextlib.suppress(BaseException):
        await call
    await withdrawn(node, approval_id)


@contextlib.asynccontextmanager
async def stdio_session(command: str, *args: str, cwd: Path | None = None
                        ) -> AsyncIterator[ClientSession]:
    """An initialized SDK ClientSession with a stdio server started as ``command args``."""
    params = StdioServerParameters(command=command, args=list(args), cwd=cwd)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        yield s


def text(result: types.CallToolResult) -> str:
    """The text blocks of a tool's result, one a line."""
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


@contextlib.asynccontextmanager
async def gate_over_http(server: str, config: Path, url: str) -> AsyncIterator[str]:
    """``signoff mcp-gate SERVER --http`` as a process on a free port, asking the daemon
    at ``url`` with the agent's key; its MCP endpoint once it says it listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "signoff", "mcp-gate", server, "--config", str(config),
        "--url", url, "--api-key", AGENT_KEY, "--http", "--port", str(port),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    try:
        line = ""
        async with asyncio.timeout(60):
            while "serving at" not in line:
                raw = await proc.stderr.readline()
                assert raw, "the gate exited before it listened"
                line = raw.decode()
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


def acted(log: Path) -> list[dict[str, Any]]:
    """The calls tests/mcp_shifty_server.py carried out, one JSON line each in ``log``."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines]
