"""Fixtures for the API tests: a running node on SQLite (in-process, or on a real port), a
client, a recording HTTP server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.api.helpers import BOB_KEY, Running, running_node, serve
from tests.fakes.http_echo import HttpEcho


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Running]:
    """A node on a SQLite file with the admin key and the named key ``bob``."""
    async with running_node(tmp_path) as running:
        yield running


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Running, str]]:
    """A node with its API on a real port of 127.0.0.1 (uvicorn), and that URL: for the
    processes under test that ask it on an agent's behalf (mcp-gate, mcp-permission,
    claude-hook). It has no MCP server of its own."""
    async with running_node(tmp_path / "daemon") as node, serve(node.app) as url:
        yield node, url


@pytest.fixture
async def client(node: Running) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client holding the admin key."""
    async with node.client() as c:
        yield c


@pytest.fixture
async def agent(node: Running) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client holding bob's key: an agent that asks (POST /v1/approvals),
    never the admin who decides (an outside request is never approved by its asker)."""
    async with node.client(BOB_KEY) as c:
        yield c


@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    """A local HTTP server that records every request (webhook target)."""
    async with HttpEcho() as server:
        yield server
