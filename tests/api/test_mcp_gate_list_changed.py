"""`signoff mcp-gate` when its upstream changes its tools while running: the gate tells its
client (``notifications/tools/list_changed``, advertised as ``tools.listChanged``) once
it holds the new listing, judges the very next call by the tool as now listed, and
refuses a tool no longer listed. Its prompts and resources likewise: each session that
listed them is told (``notifications/prompts/list_changed``,
``notifications/resources/list_changed``) when the upstream says they changed or comes
back from a restart. Real processes throughout: the upstream is
tests/mcp_shifty_server.py (the SDK's low-level Server, which changes ``act``, its prompt
or its resources when ``shift`` is called), the gate runs over stdio (and ``--http``)
driven by the SDK's ClientSession, and decides through a daemon on uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.api.asking import AGENT_KEY, acted, asked, decide, gate_over_http, pending, text
from tests.api.helpers import Running

pytestmark = pytest.mark.slow

SHIFTY = Path(__file__).resolve().parents[1] / "mcp_shifty_server.py"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "acted.log"


@pytest.fixture
def config(tmp_path: Path, log: Path) -> Path:
    return gate_config(tmp_path, log)


def gate_config(tmp_path: Path, log: Path, *flags: str) -> Path:
    """The gate's config: ``shift`` is READ (runs unasked), ``act`` is asked about; the
    upstream started with ``flags``."""
    path = tmp_path / "gate.toml"
    command = ", ".join(json.dumps(p) for p in (sys.executable, str(SHIFTY), str(log), *flags))
    path.write_text(f'''
[daemon]
work_dir = "{tmp_path / 'gate-work'}"
state_dir = "{tmp_path / 'gate-state'}"
[[mcp.servers]]
name = "shifty"
command = [{command}]
[mcp.servers.tools.shift]
risk = "READ"
[mcp.servers.tools.act]
targets = ["path"]
''')
    return path


NOTICES = {types.ToolListChangedNotification: "tools",
           types.PromptListChangedNotification: "prompts",
           types.ResourceListChangedNotification: "resources"}


class Client:
    """A ClientSession with the gate, and the list_changed notices it received, in order
    (by list: "tools", "prompts", "resources")."""

    def __init__(self) -> None:
        self.notices: list[str] = []
        self.taken: dict[str, int] = {}  # notices `notice` already returned, by list
        self.noticed = asyncio.Event()
        self.session: ClientSession | None = None
        self.init: types.InitializeResult | None = None

    async def on_message(self, message: Any) -> None:
        if type(message) in NOTICES:
            self.notices.append(NOTICES[type(message)])
            self.noticed.set()

    async def notice(self, kind: str = "tools") -> None:
        """Wait for the next notice that ``kind`` changed (a generous bound: the machine
        may be busy)."""
        async with asyncio.timeout(60):
            while self.notices.count(kind) <= self.taken.get(kind, 0):
                self.noticed.clear()
                await self.noticed.wait()
        self.taken[kind] = self.taken.get(kind, 0) + 1

    @property
    def s(self) -> ClientSession:
        assert self.session is not None
        return self.session

    async def descriptions(self) -> dict[str, str]:
        return {t.name: t.description or "" for t in (await self.s.list_tools()).tools}


@contextlib.asynccontextmanager
async def gate(config: Path, url: str) -> AsyncIterator[Client]:
    """The gate in front of the shifty server, as an MCP client starts it over stdio."""
    client = Client()
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "signoff", "mcp-gate", "shifty", "--config", str(config), "--url", url,
        "--api-key", AGENT_KEY])
    async with stdio_client(params) as (read, write), ClientSession(
            read, write, message_handler=client.on_message) as s:
        client.session = s
        client.init = await s.initialize()
        yield client


@contextlib.asynccontextmanager
async def http_client(url: str) -> AsyncIterator[Client]:
    """An SDK ClientSession over streamable HTTP (its own session of the gate)."""
    client = Client()
    async with streamable_http_client(url) as (read, write), ClientSession(
            read, write, message_handler=client.on_message) as s:
        client.session = s
        client.init = await s.initialize()
        yield client


async def shift(client: Client, what: str = "tools") -> None:
    """Have the upstream change its tools, prompts or resources (READ: forwarded without
    asking)."""
    result = await client.s.call_tool("shift", {"what": what})
    assert not result.is_error, text(result)


async def prompts(client: Client) -> dict[str, str]:
    return {p.name: p.description or "" for p in (await client.s.list_prompts()).prompts}


async def resources(client: Client) -> list[str]:
    return [str(r.uri) for r in (await client.s.list_resources()).resources]


async def templates(client: Client) -> list[str]:
    listed = (await client.s.list_resource_templates()).resource_templates
    return [t.uri_template for t in listed]


async def test_the_client_is_told_and_lists_the_new_definition(
        daemon: tuple[Running, str], config: Path, log: Path) -> None:
    """The gate says it may change its tools; after the upstream redefines ``act`` the
    client gets tools/list_changed, and a tools/list right after it shows the new
    definition (old code: no notice ever came, the client kept "changes nothing")."""
    _, url = daemon
    async with gate(config, url) as client:
        assert client.init is not None and client.init.capabilities.tools is not None
        assert client.init.capabilities.tools.list_changed is True
        before = await client.descriptions()
        assert before["act"] == "Look at a path (changes nothing)."
        await shift(client)
        await client.notice()
        after = await client.descriptions()
    assert after["act"] == "Delete the path, recursively."
    assert client.notices == ["tools"]


async def test_the_next_call_of_a_redefined_tool_is_asked_again_despite_an_always(
        daemon: tuple[Running, str], tmp_path: Path, log: Path) -> None:
    """An Always for ``act`` while it "changes nothing"; the upstream redefines it, and
    is slow to list it again; the client's very next call (without waiting for the
    notice or listing again) waits for that listing and is a new request, for the new
    definition; a denial runs nothing (old code: the call was judged by the listing the
    upstream had just said was stale, and ran under the old Always)."""
    node, url = daemon
    async with gate(gate_config(tmp_path, log, "--slow-list"), url) as client:
        await client.descriptions()
        first = asyncio.create_task(client.s.call_tool("act", {"path": "notes"}))
        item = (await asked(node))[0]
        await decide(node, item["id"], "approve", {"scope": "always"})
        assert not (await asyncio.wait_for(first, 60)).is_error
        again = await client.s.call_tool("act", {"path": "notes"})  # the Always covers it
        assert not again.is_error, text(again)
        assert await pending(node) == []

        await shift(client)
        redefined = asyncio.create_task(client.s.call_tool("act", {"path": "notes"}))
        items = await asked(node)
        assert [i["action"]["tool"] for i in items] == ["shifty.act"]
        await decide(node, items[0]["id"], "deny")
        result = await asyncio.wait_for(redefined, 60)
        await client.notice()  # and the client was told
    assert result.is_error and "not approved" in text(result), text(result)
    assert len(acted(log)) == 2, "the redefined tool ran under the old tool's Always"


async def test_a_tool_the_upstream_no_longer_lists_is_refused(
        daemon: tuple[Running, str], config: Path, log: Path) -> None:
    """The upstream stops listing ``act`` (while still answering to its name): the client
    is told, lists no ``act``, and a call of it is refused by the gate without asking
    anyone or reaching the upstream."""
    node, url = daemon
    async with gate(config, url) as client:
        assert "act" in await client.descriptions()
        await shift(client)
        await client.notice()
        await shift(client)  # version 2: act is gone
        await client.notice()
        listed = await client.descriptions()
        result = await client.s.call_tool("act", {"path": "notes"})
    assert "act" not in listed and "shift" in listed
    assert result.is_error and "has no tool 'act'" in text(result), text(result)
    assert await pending(node) == []
    assert acted(log) == []


async def test_over_http_every_session_that_listed_is_told(
        daemon: tuple[Running, str], config: Path, log: Path) -> None:
    """Two HTTP sessions of one gate list the tools; one has the upstream redefine
    ``act``: both are told (each on its own stream), and each then lists the new
    definition."""
    _, url = daemon
    async with gate_over_http("shifty", config, url) as endpoint, http_client(endpoint) as first, \
            http_client(endpoint) as second:
        for client in (first, second):
            assert client.init is not None and client.init.capabilities.tools is not None
            assert client.init.capabilities.tools.list_changed is True
            assert (await client.descriptions())["act"].startswith("Look")
        await shift(first)
        await first.notice()
        await second.notice()
        assert (await first.descriptions())["act"].startswith("Delete")
        assert (await second.descriptions())["act"].startswith("Delete")


async def test_the_client_is_told_when_prompts_or_resources_change(
        daemon: tuple[Running, str], config: Path, log: Path) -> None:
    """The gate says its prompts and resources may change (and offers no subscriptions);
    after the upstream changes its prompts, then its resources, the client is told of
    each (and of nothing else), and lists the new ones right after (old code: no notice
    came, so the client kept offering the prompts and resources as first listed)."""
    _, url = daemon
    async with gate(config, url) as client:
        assert client.init is not None
        caps = client.init.capabilities
        assert caps.prompts is not None and caps.prompts.list_changed is True
        assert caps.resources is not None and caps.resources.list_changed is True
        assert not caps.resources.subscribe
        assert await prompts(client) == {"brief": "A brief, edition 0."}
        assert await resources(client) == ["shifty://edition/0"]
        await shift(client, "prompts")
        await client.notice("prompts")
        assert await prompts(client) == {"brief": "A brief, edition 1."}
        await shift(client, "resources")
        await client.notice("resources")
        assert await resources(client) == ["shifty://edition/1"]
    assert client.notices == ["prompts", "resources"]
    assert acted(log) == []


async def test_over_http_each_session_is_told_of_what_it_listed(
        daemon: tuple[Running, str], config: Path, log: Path) -> None:
    """Two HTTP sessions of one gate: both list the tools, the first its prompts, the
    second the resource templates. A change of the prompts is told to the first only, of
    the resources to the second only; a change of the tools, which both listed, reaches
    both after what each was told before."""
    _, url = daemon
    async with gate_over_http("shifty", config, url) as endpoint, http_client(endpoint) as first, \
            http_client(endpoint) as second:
        for client in (first, second):
            await client.descriptions()
        assert (await prompts(first))["brief"].endswith("edition 0.")
        assert await templates(second) == ["shifty://edition/0/{part}"]
        await shift(first, "prompts")
        await first.notice("prompts")
        await shift(first, "resources")
        await second.notice("resources")
        assert await templates(second) == ["shifty://edition/1/{part}"]
        await shift(first)  # a notice of the tools comes after any other on a stream
        await first.notice()
        await second.notice()
    assert first.notices == ["prompts", "tools"]
    assert second.notices == ["resources", "tools"]


async def test_a_restarted_upstream_is_a_change_of_its_prompts_and_resources(
        daemon: tuple[Running, str], config: Path, log: Path) -> None:
    """The upstream is upgraded and restarted (killed; the gate starts it again): the
    client that listed its prompts and resources is told of both, and lists the new ones;
    its tools are the same, so of those it is not told."""
    _, url = daemon
    async with gate(config, url) as client:
        await client.descriptions()
        assert await prompts(client) == {"brief": "A brief, edition 0."}
        assert await resources(client) == ["shifty://edition/0"]
        pid_file = log.with_name(log.name + ".pid")
        pid = int(pid_file.read_text())
        for what in ("prompts", "resources"):  # what the upgraded server lists
            log.with_name(f"{log.name}.{what}").write_text("1")
        os.kill(pid, signal.SIGKILL)
        await client.notice("prompts")
        await client.notice("resources")
        assert int(pid_file.read_text()) != pid
        assert await prompts(client) == {"brief": "A brief, edition 1."}
        assert await resources(client) == ["shifty://edition/1"]
    assert sorted(client.notices) == ["prompts", "resources"]
