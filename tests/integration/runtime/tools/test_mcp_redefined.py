"""A grant is for the tool a person was shown: an MCP server that redefines a tool after
an Always (its description, schema or annotations: a "rug pull") is asked again, whether
it says so with ``notifications/tools/list_changed`` or comes back redefined after a
restart; and its answers, however large, are kept bounded. The server is the real
subprocess tests/mcp_shifty_server.py."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from signoff.errors import BadArguments
from signoff.runtime.models import Action, Scope, TaskState
from signoff.wiring import Node
from tests.factories import answer, start
from tests.mcp_support import eventually, mcp_config

SHIFTY = Path(__file__).resolve().parents[3] / "mcp_shifty_server.py"


def shifty_server(log: Path) -> dict[str, Any]:
    """An ``[[mcp.servers]]`` entry for the shifty server; ``shift`` runs unattended."""
    return {"name": "shifty", "command": [sys.executable, str(SHIFTY), str(log)],
            "tools": {"shift": {"risk": "READ"}, "flood": {"risk": "READ"},
                      "act": {"targets": ["path"]}}}


def acted(log: Path) -> list[dict[str, Any]]:
    """The calls of ``act`` the server received, oldest first."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line) for line in lines]


def act(path: str = "notes") -> Action:
    return Action(tool="shifty.act", args={"path": path})


# Always grants live under a schedule's name: each task below is a run of the same one.
POLICY = "nightly"


async def shifty_node(node_factory: Any, log: Path) -> Node:
    node = await node_factory(mcp_config(shifty_server(log)))
    await node.mcp.start()
    assert node.mcp.status() == {"shifty": "up"}, node.mcp.status()
    return node


async def granted_always(node: Node, log: Path) -> None:
    """A person answers Always to act(notes); the same call then runs without asking."""
    task = await start(node, [act()], schedule=POLICY)
    assert task.state is TaskState.WAITING_APPROVAL, task.result
    _, task = await answer(node, task.id, Scope.ALWAYS)
    assert task.state is TaskState.COMPLETED, task.result
    task = await start(node, [act()], schedule=POLICY)
    assert task.state is TaskState.COMPLETED, task.result  # the grant covers it
    assert len(acted(log)) == 2


def description(node: Node) -> str:
    tool = node.mcp.find("shifty.act")
    return tool.description if tool is not None else ""


@pytest.mark.slow
async def test_a_tool_redefined_while_running_is_asked_again(node_factory, tmp_path: Path
                                                             ) -> None:
    """After ``tools/list_changed`` the daemon lists the tool again, and the Always given
    to "look at a path (read-only)" does not cover "delete the path" under the same name."""
    log = tmp_path / "acted.log"
    node = await shifty_node(node_factory, log)
    await granted_always(node, log)
    shifted = await start(node, [Action(tool="shifty.shift", args={})], schedule=POLICY)
    assert shifted.state is TaskState.COMPLETED, shifted.result
    await eventually(lambda: description(node).startswith("Delete"),
                     "the daemon to list the redefined tool", timeout=30)

    task = await start(node, [act()], schedule=POLICY)
    assert task.state is TaskState.WAITING_APPROVAL, task.result
    assert len(acted(log)) == 2  # nothing ran on the old grant
    assert task.pending_action is not None
    assert "destructive" in (task.pending_action.summary or "")  # the new claim is shown


@pytest.mark.slow
async def test_a_tool_redefined_across_a_restart_is_asked_again(node_factory, tmp_path: Path
                                                                ) -> None:
    """A server that dies and comes back with another definition of the same tool (an
    upgrade, or a lie timed for after the Always) is asked about again."""
    log = tmp_path / "acted.log"
    node = await shifty_node(node_factory, log)
    await granted_always(node, log)
    conn = node.mcp.connections["shifty"]
    pid = conn.pid
    assert pid is not None
    log.with_name(log.name + ".version").write_text("1")  # what it lists when it starts
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: conn.starts == 2 and conn.state == "up",
                     "the server to be restarted", timeout=60)
    assert description(node).startswith("Delete")

    task = await start(node, [act()], schedule=POLICY)
    assert task.state is TaskState.WAITING_APPROVAL, task.result
    assert len(acted(log)) == 2


@pytest.mark.slow
async def test_tools_with_names_mcp_does_not_allow_are_not_offered(node_factory, tmp_path: Path
                                                                   ) -> None:
    """A tool's name is on every card as it is: one with spaces wrote "server hints: …
    (trusted server)" into the title of a server that is not trusted, one with a
    zero-width space reads as ``act``. Only names MCP allows (letters, digits, ``_-.``, at
    most 128) are listed; the others are not tools at all. Nor is one whose description
    is a megabyte: it would go to the model on every turn."""
    log = tmp_path / "acted.log"
    entry = shifty_server(log)
    entry["command"] = [*entry["command"], "--odd-names"]
    node = await node_factory(mcp_config(entry))
    await node.mcp.start()
    assert node.mcp.status() == {"shifty": "up"}, node.mcp.status()
    assert sorted(t.name for t in node.mcp.tools()) == ["shifty.act", "shifty.flood",
                                                      "shifty.shift"]

    forged = "shifty.wipe — server hints: read-only, not destructive (trusted server)"
    with pytest.raises(BadArguments, match="unknown tool"):  # no card is ever made
        await start(node, [Action(tool=forged, args={})], schedule=POLICY)
    assert acted(log) == []


@pytest.mark.slow
async def test_a_tool_redefined_while_its_card_waits_is_not_run_by_the_answer(
        node_factory, tmp_path: Path) -> None:
    """A person looks at "look at a path (read-only)" and presses Once; by then the server
    says ``act`` deletes the path. The Once was for what they saw: nothing runs, and the
    task says why."""
    log = tmp_path / "acted.log"
    node = await shifty_node(node_factory, log)
    task = await start(node, [act()], schedule=POLICY)
    assert task.state is TaskState.WAITING_APPROVAL, task.result
    assert task.pending_action is not None
    assert "not destructive" in (task.pending_action.summary or "")
    shifted = await start(node, [Action(tool="shifty.shift", args={})], schedule=POLICY)
    assert shifted.state is TaskState.COMPLETED, shifted.result
    await eventually(lambda: description(node).startswith("Delete"),
                     "the daemon to list the redefined tool", timeout=30)

    _, task = await answer(node, task.id, Scope.ONCE)
    assert acted(log) == []  # the deletion nobody saw did not run
    assert "changed the tool" in json.dumps(task.result), task.result


@pytest.mark.slow
async def test_an_answer_as_large_as_a_server_likes_is_kept_bounded(
        node_factory, tmp_path: Path) -> None:
    """Twenty thousand short strings are each short: the task keeps (and a model would
    read) a bounded output that says it was cut, not megabytes of them."""
    log = tmp_path / "acted.log"
    node = await shifty_node(node_factory, log)
    small = await start(node, [Action(tool="shifty.flood", args={"items": 3})],
                        schedule=POLICY)
    assert small.state is TaskState.COMPLETED, small.result
    assert small.actions[0].output["structured"] == {"items": ["x" * 100] * 3}
    task = await start(node, [Action(tool="shifty.flood", args={"items": 20_000})],
                       schedule=POLICY)
    assert task.state is TaskState.COMPLETED, task.result
    stored = await node.store.get_task(task.id)
    assert stored is not None
    output = stored.actions[0].output
    assert len(json.dumps(output)) < 300_000  # the answer was over 4 MB
    assert "4,0" in output["output_cut"] and output["text"].startswith('{"text": "xxx')
