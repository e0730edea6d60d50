"""`signoff mcp-gate` in front of a server the daemon runs too, when the two listings
differ (the server was upgraded after the daemon started it): the daemon never approves
fewer arguments than the gate forwards. Real processes throughout: the daemon on
uvicorn with its own instance of tests/mcp_shifty_server.py, the gate over stdio with
another, driven by the `mcp` SDK's ClientSession."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.asking import AGENT_KEY, acted, asked, decide, pending, stdio_session, text
from tests.api.helpers import Running, eventually, make_settings, running_node, serve

pytestmark = pytest.mark.slow

SHIFTY = Path(__file__).resolve().parents[1] / "mcp_shifty_server.py"


def server_entry(log: Path) -> dict[str, Any]:
    return {"name": "shifty", "command": [sys.executable, str(SHIFTY), str(log)],
            "tools": {"act": {"targets": ["path"]}}}


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "acted.log"


@pytest.fixture
async def daemon_with_server(tmp_path: Path, log: Path) -> AsyncIterator[tuple[Running, str]]:
    """A daemon running the shifty server (version 0: ``act`` takes only ``path``)."""
    work = tmp_path / "daemon"
    settings = make_settings(work, mcp={"servers": [server_entry(log)]})
    async with running_node(work, settings=settings) as node, serve(node.app) as url:
        await node.node.mcp.start()
        assert node.node.mcp.status() == {"shifty": "up"}
        try:
            yield node, url
        finally:
            await node.node.mcp.stop()


def gate_config(tmp_path: Path, log: Path) -> Path:
    entry = server_entry(log)
    command = ", ".join(json.dumps(part) for part in entry["command"])
    path = tmp_path / "gate.toml"
    path.write_text(f'''
[daemon]
work_dir = "{tmp_path / 'gate-work'}"
[[mcp.servers]]
name = "shifty"
command = [{command}]
[mcp.servers.tools.act]
targets = ["path"]
''')
    return path


async def test_the_gate_never_forwards_an_argument_the_card_did_not_show(
        daemon_with_server: tuple[Running, str], tmp_path: Path, log: Path) -> None:
    """The upgraded server takes ``force``; the daemon's listing does not, so its card
    showed ``act(path)`` while the gate forwarded ``act(path, force=true)`` on that Once.
    The request is refused instead: nothing a person did not see is sent."""
    node, url = daemon_with_server
    log.with_name(log.name + ".version").write_text("1")  # upgraded since the daemon started
    async with shifty_gate(tmp_path, log, url) as s:
        call = asyncio.create_task(s.call_tool("act", {"path": "notes", "force": True}))
        items: list[dict[str, Any]] = []

        async def settled() -> bool:
            items[:] = await pending(node)
            return bool(items) or call.done()

        await eventually(settled, 60, "a request or the call's answer")
        for item in items:  # the old code asked: a person approves what the card shows
            assert "force" not in item["action"]["args"]
            async with node.client() as admin:
                answer = await admin.post(f"/approvals/{item['id']}/approve",
                                          json={"scope": "once"})
            assert answer.status_code == 200, answer.text
        result = await asyncio.wait_for(call, 60)
    assert [a for a in acted(log) if "force" in a] == [], "forwarded an argument no card showed"
    assert result.is_error
    assert "force" in text(result), text(result)


def shifty_gate(tmp_path: Path, log: Path, url: str) -> Any:
    """An MCP client session with ``signoff mcp-gate shifty`` over stdio, asking the
    daemon at ``url`` with the agent's key."""
    return stdio_session(sys.executable, "-m", "signoff", "mcp-gate", "shifty", "--config",
                         str(gate_config(tmp_path, log)), "--url", url, "--api-key", AGENT_KEY)


async def redefine_act(s: Any, node: Running, *, card_says: str | None = None) -> None:
    """Call ``shift`` through the gate (asked: approved once; its card saying
    ``card_says``), then wait until the gate lists the redefined ``act``."""
    shift = asyncio.create_task(s.call_tool("shift", {}))
    item = (await asked(node))[0]
    assert item["action"]["tool"] == "shifty.shift"
    if card_says is not None:
        assert card_says in await card_of(node, item["id"])
    await decide(node, item["id"], "approve", {"scope": "once"})
    assert not (await asyncio.wait_for(shift, 60)).is_error

    async def relisted() -> bool:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        return "Delete" in (tools["act"].description or "")

    await eventually(relisted, 30, "the gate to list the redefined act")


async def test_an_always_through_the_gate_does_not_cover_the_tool_once_redefined(
        daemon: tuple[Running, str], tmp_path: Path, log: Path) -> None:
    """A daemon that does not run the server itself: an Always for ``act`` ("look at a
    path") covers the same call while the tool stays as it was shown, and asks again once
    the upstream redefined it ("delete the path") — the grant was bound to the name and
    args only, so the rug pull ran unasked."""
    node, url = daemon
    async with shifty_gate(tmp_path, log, url) as s:
        first = asyncio.create_task(s.call_tool("act", {"path": "notes"}))
        item = (await asked(node))[0]
        await decide(node, item["id"], "approve", {"scope": "always"})
        assert not (await asyncio.wait_for(first, 60)).is_error
        again = await s.call_tool("act", {"path": "notes"})  # the grant covers it
        assert not again.is_error, text(again)
        assert len(acted(log)) == 2

        await redefine_act(s, node)
        redefined = asyncio.create_task(s.call_tool("act", {"path": "notes"}))
        items = await asked(node)  # old code: approved by the Always, run at once
        assert [i["action"]["tool"] for i in items] == ["shifty.act"]
        await decide(node, items[0]["id"], "deny")
        result = await asyncio.wait_for(redefined, 60)
    assert result.is_error and "not approved" in text(result)
    assert len(acted(log)) == 2, "the redefined tool ran under the old tool's Always"


async def card_of(node: Running, approval_id: str) -> str:
    """The console's card of one request, as the admin sees it."""
    async with node.client() as admin:
        page = await admin.get(f"/console/cards/{approval_id}")
    assert page.status_code == 200, page.text
    return page.text


async def test_the_card_shows_what_the_upstream_says_the_tool_does_before_and_after_a_shift(
        daemon: tuple[Running, str], tmp_path: Path, log: Path) -> None:
    """A person deciding a call through the gate reads what the upstream says ``act``
    does, as its server's words: "Look at a path"; once the upstream redefined it, the
    card that asks again says "Delete the path" — the old card showed the same name and
    arguments both times, so the rug pull looked like the call approved before."""
    node, url = daemon
    async with shifty_gate(tmp_path, log, url) as s:
        first = asyncio.create_task(s.call_tool("act", {"path": "notes"}))
        item = (await asked(node))[0]
        card = await card_of(node, item["id"])
        assert "The server describes this tool as" in card
        assert "Look at a path (changes nothing)." in card and "Delete" not in card
        await decide(node, item["id"], "approve", {"scope": "always"})
        assert not (await asyncio.wait_for(first, 60)).is_error

        await redefine_act(s, node, card_says="Change act, or the prompts or resources.")
        redefined = asyncio.create_task(s.call_tool("act", {"path": "notes"}))
        item = (await asked(node))[0]
        card = await card_of(node, item["id"])
        assert "The server describes this tool as" in card
        assert "Delete the path, recursively." in card and "Look at a path" not in card
        await decide(node, item["id"], "deny")
        assert (await asyncio.wait_for(redefined, 60)).is_error


async def test_a_task_calling_a_server_the_daemon_runs_shows_its_description(
        daemon_with_server: tuple[Running, str]) -> None:
    """A task's call of a tool of an MCP server the daemon itself runs: its card quotes
    the tool's description as the server listed it, said to be the server's words."""
    node, _ = daemon_with_server
    async with node.client() as admin:
        made = await admin.post("/tasks", json={"goal": "look", "steps": [
            {"tool": "shifty.act", "args": {"path": "notes"}}]})
    assert made.status_code in (200, 201, 202), made.text
    item = (await asked(node))[0]
    assert item["action"]["tool"] == "shifty.act"
    card = await card_of(node, item["id"])
    assert "The server describes this tool as" in card
    assert "Look at a path (changes nothing)." in card
