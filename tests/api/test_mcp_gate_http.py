"""`signoff mcp-gate SERVER --http`: the gate on the `mcp` SDK's streamable HTTP
transport, driven by the SDK's own HTTP client, in front of the project's notes test
server (tests/mcp_notes_server.py, built on the SDK's MCPServer), deciding through a
daemon on uvicorn: each client session has its own policy_id, prompts and resources pass
through without asking anyone, tools are gated as over stdio."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.api.asking import (
    asked,
    cancelled_and_withdrawn,
    decide,
    gate_over_http,
    pending,
    text,
)
from tests.api.helpers import Running

NOTES_SERVER = Path(__file__).resolve().parents[1] / "mcp_notes_server.py"

pytestmark = pytest.mark.slow


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return tmp_path / "notes.txt"


@pytest.fixture
def config(tmp_path: Path, notes: Path) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(f'''
[daemon]
work_dir = "{tmp_path / 'gate-work'}"
state_dir = "{tmp_path / 'gate-state'}"
[[mcp.servers]]
name = "notes"
command = ["{sys.executable}", "{NOTES_SERVER}", "{notes}"]
[mcp.servers.tools.write_note]
risk = "SEND"
capability = "notes.write"
''')
    return path


@pytest.fixture
async def gate_url(daemon: tuple[Running, str], config: Path) -> AsyncIterator[str]:
    """The gate as a process serving HTTP; its MCP endpoint once it says it listens."""
    _, url = daemon
    async with gate_over_http("notes", config, url) as endpoint:
        yield endpoint


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK ClientSession over streamable HTTP (ending it DELETEs the
    session)."""
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        yield s


async def test_prompts_and_resources_pass_through_without_asking(
        daemon: tuple[Running, str], gate_url: str) -> None:
    """prompts/list|get and resources/list|templates|read come back as the upstream sent
    them, and nobody is asked about any of them."""
    node, _ = daemon
    async with client(gate_url) as s:
        assert [p.name for p in (await s.list_prompts()).prompts] == ["review"]
        prompt = await s.get_prompt("review", {"topic": "the release"})
        assert "Please review the release carefully." in str(prompt.messages[0].content)
        assert [str(r.uri) for r in (await s.list_resources()).resources] == ["notes://readme"]
        templates = (await s.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["notes://day/{day}"]
        read = await s.read_resource("notes://day/monday")
        assert read.contents[0].text == "notes of monday"  # type: ignore[union-attr]
    assert await pending(node) == []


async def test_each_session_is_asked_under_its_own_policy_id_and_approved_runs(
        daemon: tuple[Running, str], gate_url: str, notes: Path) -> None:
    """Two HTTP sessions wait under two policy_ids (mcp-gate:notes:session:…); the call an
    admin approves runs, the one denied is an isError result and writes nothing."""
    node, _ = daemon
    async with client(gate_url) as first, client(gate_url) as second:
        one = asyncio.create_task(first.call_tool("write_note", {"text": "from one"}))
        [item] = await asked(node)
        two = asyncio.create_task(second.call_tool("write_note", {"text": "from two"}))
        items = await asked(node, 2)
        other = next(i for i in items if i["id"] != item["id"])
        assert item["policy_id"].startswith("mcp-gate:notes:session:")
        assert other["policy_id"].startswith("mcp-gate:notes:session:")
        assert item["policy_id"] != other["policy_id"]
        assert not notes.exists()  # nothing before a person answers
        await decide(node, item["id"], "approve", {"scope": "once"})
        await decide(node, other["id"], "deny", {"reason": "not this one"})
        approved, denied = await asyncio.wait_for(asyncio.gather(one, two), 60)
    assert not approved.is_error and text(approved) == "noted: from one"
    assert denied.is_error and "not this one" in text(denied)
    assert notes.read_text() == "from one\n"


async def test_a_session_that_ends_withdraws_its_waiting_call(
        daemon: tuple[Running, str], gate_url: str, notes: Path) -> None:
    """The client ends its session (DELETE) while a call waits: the request is withdrawn."""
    node, _ = daemon
    async with client(gate_url) as s:
        call = asyncio.create_task(s.call_tool("write_note", {"text": "late"}))
        [item] = await asked(node)
    await cancelled_and_withdrawn(node, call, item["id"])
    assert not notes.exists()


def test_a_host_off_loopback_is_refused(config: Path) -> None:
    """The HTTP endpoint has no sign-in of its own: --host 0.0.0.0 exits 2 saying so."""
    done = subprocess.run([sys.executable, "-m", "signoff", "mcp-gate", "notes", "--config",
                           str(config), "--http", "--host", "0.0.0.0"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    assert "loopback only" in done.stderr


async def test_a_call_the_client_cancels_withdraws_its_request(
        daemon: tuple[Running, str], gate_url: str, notes: Path) -> None:
    """The client cancels a waiting call but keeps its session: the request is withdrawn."""
    node, _ = daemon
    async with client(gate_url) as s:
        call = asyncio.create_task(s.call_tool("write_note", {"text": "never mind"}))
        [item] = await asked(node)
        await cancelled_and_withdrawn(node, call, item["id"])
    assert not notes.exists()


async def test_an_approval_with_edited_args_forwards_the_edit(
        daemon: tuple[Running, str], gate_url: str, notes: Path) -> None:
    """A person approves other args: the upstream gets those, never the asked ones."""
    node, _ = daemon
    async with client(gate_url) as s:
        call = asyncio.create_task(s.call_tool("write_note", {"text": "rm -rf /"}))
        [item] = await asked(node)
        await decide(node, item["id"], "approve", {"scope": "once", "args": {"text": "ls"}})
        result = await asyncio.wait_for(call, 60)
    assert not result.is_error and text(result) == "noted: ls", text(result)
    assert notes.read_text() == "ls\n"


def test_a_port_in_use_is_one_clear_error(config: Path) -> None:
    """Another program holds the port: exit 2 naming the address, nothing served."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "signoff", "mcp-gate", "notes",
                               "--config", str(config), "--http", "--port", str(port)],
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
