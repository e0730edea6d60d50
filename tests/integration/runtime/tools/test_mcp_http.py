"""A server reached over streamable HTTP (``url``): the real mcp-server-git's own MCPServer
served by uvicorn on a local port, used through the SDK's streamable HTTP client."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn
from mcp_server_git.server import create_server

from signoff.runtime.models import Scope, TaskState
from tests.factories import answer, start
from tests.mcp_support import GIT_RULES, add, eventually, git, make_repo, mcp_config, status


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def http_git_server(repo: Path) -> AsyncIterator[str]:
    """mcp-server-git's server app on http://127.0.0.1:PORT/mcp while the block runs."""
    port = free_port()
    app = create_server(repo).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started, "uvicorn to start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await serving


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


async def test_tools_of_an_http_server_are_labelled_and_gated_like_stdio_ones(
        node_factory, repo: Path) -> None:
    """git_status (READ) runs; git_add waits and, approved, stages the file."""
    async with http_git_server(repo) as url:
        node = await node_factory(mcp_config({"name": "git", "url": url, "tools": GIT_RULES}))
        await node.mcp.start()
        assert node.mcp.status() == {"git": "up"}, node.mcp.status()
        task = await start(node, [status(repo), add(repo, "new.txt")])
        assert task.state is TaskState.WAITING_APPROVAL
        assert "new.txt" in task.actions[0].output["text"]
        _, task = await answer(node, task.id, Scope.ONCE)
        assert task.state is TaskState.COMPLETED, task.result
        assert git(repo, "status", "--porcelain") == "A  new.txt\n"
        await node.mcp.stop()


async def test_an_http_server_that_does_not_answer_is_down(node_factory) -> None:
    """Nothing listens on the URL: the server is "down: …" and its tools say so."""
    url = f"http://127.0.0.1:{free_port()}/mcp"
    node = await node_factory(mcp_config({"name": "git", "url": url, "tools": GIT_RULES,
                                          "connect_timeout": "5s"}))
    await node.mcp.start()
    assert node.mcp.status()["git"].startswith("down: "), node.mcp.status()
    task = await start(node, [status(Path("/srv/repo"))])
    assert task.state is TaskState.FAILED
    assert "MCP server 'git' is down" in (task.result or {}).get("reason", "")
