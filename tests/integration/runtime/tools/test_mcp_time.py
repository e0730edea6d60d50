"""Tools of the real `mcp-server-time`: a tool left out of the config asks (default_risk),
a listed READ one does not, and only a trusted server's readOnlyHint makes a tool READ."""

from __future__ import annotations

from pathlib import Path

import pytest

from signoff.runtime.models import Action, RiskClass, TaskState
from signoff.wiring import Node
from tests.factories import start
from tests.mcp_support import mcp_config, time_server

NOW = Action(tool="time.get_current_time", args={"timezone": "Europe/Berlin"})
CONVERT = Action(tool="time.convert_time", args={"source_timezone": "UTC", "time": "12:00",
                                                 "target_timezone": "Asia/Tokyo"})
READ_RULE = {"get_current_time": {"risk": "READ", "capability": "time.read"}}


async def time_node(node_factory, **server) -> Node:
    node = await node_factory(mcp_config(time_server(**server)))
    await node.mcp.start()
    assert node.mcp.status() == {"time": "up"}, node.mcp.status()
    return node


async def test_an_unlisted_tool_asks_and_a_listed_read_tool_does_not(node_factory) -> None:
    """get_current_time (listed READ) runs; convert_time (not listed) waits as DESTRUCTIVE."""
    node = await time_node(node_factory, tools=READ_RULE)
    task = await start(node, [NOW, CONVERT])
    assert task.state is TaskState.WAITING_APPROVAL
    assert "Europe/Berlin" in task.actions[0].output["text"]
    assert task.actions[0].capability == "time.read"
    assert task.pending_action is not None
    assert task.pending_action.tool == "time.convert_time"
    assert task.pending_action.risk is RiskClass.DESTRUCTIVE
    assert task.pending_action.capability == "mcp.time"


async def test_untrusted_read_only_hints_do_not_lower_the_risk(node_factory) -> None:
    """The server says readOnlyHint=true, but without trust_annotations the tool still asks."""
    node = await time_node(node_factory)
    task = await start(node, [NOW])
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None
    assert task.pending_action.risk is RiskClass.DESTRUCTIVE


async def test_a_trusted_servers_read_only_hint_makes_an_unlisted_tool_read(node_factory) -> None:
    """trust_annotations = true: the read-only convert_time runs unattended."""
    node = await time_node(node_factory, trust_annotations=True)
    task = await start(node, [CONVERT])
    assert task.state is TaskState.COMPLETED, task.result
    assert "Asia/Tokyo" in task.actions[0].output["text"]


async def test_annotations_never_lower_a_configured_risk(node_factory) -> None:
    """A tool configured SEND stays SEND on a trusted server that calls it read-only."""
    node = await time_node(node_factory, trust_annotations=True,
                           tools={"get_current_time": {"risk": "SEND"}})
    assert node.registry.prepare(NOW).risk is RiskClass.SEND


async def test_the_model_sees_double_underscore_names_that_resolve_back(node_factory) -> None:
    """Function names have no dots: time__get_current_time, resolved to time.get_current_time."""
    node = await time_node(node_factory, tools=READ_RULE)
    names = {s["function"]["name"] for s in node.registry.schemas()}
    assert {"time__get_current_time", "time__convert_time", "read_file"} <= names
    schema = next(s["function"]["parameters"] for s in node.registry.schemas()
                  if s["function"]["name"] == "time__get_current_time")
    assert schema["required"] == ["timezone"]
    from_model = Action(tool="time__get_current_time", args={"timezone": "UTC"})
    assert node.registry.prepare(from_model).tool == "time.get_current_time"
    assert node.registry.source_of("time.get_current_time") == "mcp:time"
    assert node.registry.source_of("read_file") == "builtin"


async def test_a_servers_log_is_kept_private_in_the_state_dir(node_factory, tmp_path) -> None:
    """The server's stderr log is written 0600 into the state dir, not the tools' work dir."""
    node = await time_node(node_factory)
    log = tmp_path / "signoff-state" / "mcp-time.log"
    assert log.exists() and not list(node.work_dir.glob("mcp-*.log"))
    assert log.stat().st_mode & 0o777 == 0o600


async def test_a_server_never_starts_in_the_work_dir(node_factory, settings_factory,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon started from its work dir (``work_dir = "."``) started its stdio servers
    there too, and ``python -m mcp_server_time`` imports from its working directory first:
    a module of that name, written by the agent unattended (write_file is DRAFT), ran as
    the server at its next start. The server starts in the state dir instead."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    planted = tmp_path / "planted"
    node = await node_factory(settings=settings_factory(mcp_config(time_server(
        tools=READ_RULE))))
    task = await start(node, [Action(tool="write_file", args={
        "path": "mcp_server_time.py",
        "content": f"open({str(planted)!r}, 'w').write('the agent ran')\n"})])
    assert task.state is TaskState.COMPLETED, task.result
    await node.mcp.start()
    assert node.mcp.status() == {"time": "up"}, node.mcp.status()
    assert not planted.exists()
    task = await start(node, [NOW])
    assert "Europe/Berlin" in task.actions[0].output["text"]
