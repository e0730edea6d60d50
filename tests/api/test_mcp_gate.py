"""`signoff mcp-gate git` driven by the real `mcp` SDK ClientSession over stdio, in front of
the real mcp-server-git, deciding through a daemon app on uvicorn: the listing is the
upstream's, READ calls are forwarded, gated calls wait for a person, refusals say so."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from tests.api.asking import (
    AGENT_KEY,
    asked,
    cancelled_and_withdrawn,
    decide,
    pending,
    stdio_session,
    text,
)
from tests.api.helpers import Running, eventually
from tests.mcp_support import git, make_repo, servers_of

pytestmark = pytest.mark.slow


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def config(tmp_path: Path, repo: Path) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(f'''
[daemon]
work_dir = "{tmp_path / 'gate-work'}"
[[mcp.servers]]
name = "git"
command = ["{sys.executable}", "-m", "mcp_server_git", "--repository", "{repo}"]
[mcp.servers.tools.git_status]
risk = "READ"
capability = "git.read"
targets = ["repo_path"]
[mcp.servers.tools.git_add]
capability = "git.write"
targets = ["repo_path", "files"]
''')
    return path


def gate(config: Path, url: str, *extra: str) -> Any:
    """The gate in front of mcp-server-git, as an MCP client starts it over stdio."""
    return stdio_session(sys.executable, "-m", "signoff", "mcp-gate", "git", "--config",
                         str(config), "--url", url, "--api-key", AGENT_KEY, *extra)


def async_true(check: Any) -> Any:
    async def run() -> bool:
        return bool(check())
    return run


async def asked_through(s: ClientSession, repo: Path, node: Running, *, file: str = "new.txt",
                        messages: list[str] | None = None
                        ) -> tuple[asyncio.Task[Any], dict[str, Any]]:
    """A git_add call of ``file`` waiting for a person, and its pending request, once the
    gate has sent its first progress notification (all kept in ``messages``)."""
    notified = asyncio.Event()

    async def progress(done: float, total: float | None, message: str | None) -> None:
        if messages is not None:
            messages.append(message or "")
        notified.set()

    args: dict[str, Any] = {"repo_path": str(repo), "files": [file]}
    call = asyncio.create_task(s.call_tool("git_add", args, progress_callback=progress))
    await asyncio.wait_for(notified.wait(), 60)
    return call, (await asked(node))[0]


async def test_the_listing_is_the_upstreams_unchanged(daemon, config: Path, repo: Path) -> None:
    """tools/list through the gate equals tools/list of mcp-server-git itself."""
    _, url = daemon
    async with gate(config, url) as through, stdio_session(
            sys.executable, "-m", "mcp_server_git", "--repository", str(repo)) as direct:
        mine = (await through.list_tools()).tools
        theirs = (await direct.list_tools()).tools
    assert [t.model_dump(by_alias=True) for t in mine] == \
        [t.model_dump(by_alias=True) for t in theirs]
    assert "git_commit" in {t.name for t in mine}


async def test_a_read_call_is_forwarded_at_once(daemon, config: Path, repo: Path) -> None:
    """git_status (READ in the gate's config) is approved by the policy and forwarded."""
    node, url = daemon
    async with gate(config, url) as s:
        result = await s.call_tool("git_status", {"repo_path": str(repo)})
    assert not result.is_error, text(result)
    assert "new.txt" in text(result)
    assert await pending(node) == []
    await eventually(async_true(lambda: servers_of(repo) == []), 30,
                     "the gate to stop its upstream server")


async def test_a_gated_call_waits_for_an_approval_given_through_the_api(
        daemon, config: Path, repo: Path) -> None:
    """git_add waits, with progress notifications, until approved; then the file is staged."""
    node, url = daemon
    messages: list[str] = []
    async with gate(config, url) as s:
        call, item = await asked_through(s, repo, node, messages=messages)
        await decide(node, item["id"], "approve", {"scope": "once"})
        assert git(repo, "status", "--porcelain") == "?? new.txt\n"  # not before the approval
        result = await asyncio.wait_for(call, 60)
    assert not result.is_error, text(result)
    assert git(repo, "status", "--porcelain") == "A  new.txt\n"
    assert item["action"]["tool"] == "git.git_add"
    assert item["task_id"] is None and item["policy_id"].startswith("mcp-gate:git:")
    assert item["requester"].startswith("mcp-gate:git@")
    assert item["action"]["targets"] == [str(repo), "new.txt"]
    assert any("waiting for approval" in m for m in messages)


async def test_a_denied_call_is_an_error_result_and_nothing_happens(
        daemon, config: Path, repo: Path) -> None:
    """Deny → isError "not approved: denied …"; the upstream was never called."""
    node, url = daemon
    async with gate(config, url) as s:
        call, item = await asked_through(s, repo, node)
        await decide(node, item["id"], "deny", {"reason": "not today"})
        result = await asyncio.wait_for(call, 60)
    assert result.is_error
    assert text(result).startswith("not approved: denied"), text(result)
    assert "not today" in text(result)
    assert git(repo, "status", "--porcelain") == "?? new.txt\n"


async def test_a_call_that_breaks_the_schema_is_refused_without_asking(
        daemon, config: Path, repo: Path) -> None:
    """No files for git_add: an error naming the argument, and no request to anyone."""
    node, url = daemon
    async with gate(config, url) as s:
        result = await s.call_tool("git_add", {"repo_path": str(repo), "files": []})
    assert result.is_error and "invalid arguments" in text(result), text(result)
    assert await pending(node) == []


async def test_a_call_nested_too_deep_is_refused_without_asking(
        daemon, config: Path, repo: Path) -> None:
    """Arguments nested deeper than 32 levels: an error naming them, and no request."""
    node, url = daemon
    deep: Any = "x"
    for _ in range(100):
        deep = {"a": deep}
    async with gate(config, url) as s, asyncio.timeout(30):
        result = await s.call_tool("git_add", {"repo_path": str(repo), "files": ["a"],
                                               "extra": deep})
    assert result.is_error and "arguments.extra" in text(result), text(result)
    assert "nested deeper than 32 levels" in text(result)
    assert await pending(node) == []


async def test_an_unreachable_daemon_means_not_approved(config: Path, repo: Path) -> None:
    """Fail closed: with no daemon listening, a gated call is refused, not forwarded."""
    async with gate(config, "http://127.0.0.1:9") as s:
        result = await s.call_tool("git_add", {"repo_path": str(repo), "files": ["new.txt"]})
    assert result.is_error and text(result).startswith("not approved: unreachable")
    assert git(repo, "status", "--porcelain") == "?? new.txt\n"


def test_an_unknown_server_name_exits_2(config: Path) -> None:
    """The gate names the servers it knows and starts nothing."""
    done = subprocess.run([sys.executable, "-m", "signoff", "mcp-gate", "gitlab", "--config",
                           str(config)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2
    assert "no [[mcp.servers]] entry named 'gitlab' (configured: git)" in done.stderr


async def test_a_call_the_client_cancels_withdraws_its_request(
        daemon, config: Path, repo: Path) -> None:
    """The client gives up on a waiting call (notifications/cancelled): the request is
    withdrawn, so its card no longer asks anyone."""
    node, url = daemon
    async with gate(config, url) as s:
        call, item = await asked_through(s, repo, node)
        await cancelled_and_withdrawn(node, call, item["id"])
    assert git(repo, "status", "--porcelain") == "?? new.txt\n"


async def test_a_client_that_disconnects_withdraws_what_it_waited_for(
        daemon, config: Path, repo: Path) -> None:
    """The client goes away while a call waits: the gate withdraws the request."""
    node, url = daemon
    async with gate(config, url) as s:
        call, item = await asked_through(s, repo, node)
    await cancelled_and_withdrawn(node, call, item["id"])


async def test_the_policy_id_is_stable_per_client_or_as_given(
        daemon, config: Path, repo: Path) -> None:
    """By default the policy_id is mcp-gate:SERVER:<client name>, the same after the gate
    restarts (so an Always still covers the call); --policy-id sets it."""
    node, url = daemon
    seen = []
    for extra in ((), (), ("--policy-id", "ide-laptop")):
        async with gate(config, url, *extra) as s:
            call, item = await asked_through(s, repo, node)
            seen.append(item["policy_id"])
            await decide(node, item["id"], "approve", {"scope": "once"})  # each run asks again
            await asyncio.wait_for(call, 60)
    assert seen[0] == seen[1] and seen[0].startswith("mcp-gate:git:")
    assert seen[2] == "ide-laptop"


async def test_an_error_result_reports_its_text_as_the_outcome(
        daemon, config: Path, repo: Path) -> None:
    """An approved call the upstream answers with isError is reported as a failed outcome
    that keeps the error's text (not a bare "error")."""
    node, url = daemon
    async with gate(config, url) as s:
        call, item = await asked_through(s, repo, node, file="missing.txt")
        await decide(node, item["id"], "approve", {"scope": "once"})
        result = await asyncio.wait_for(call, 60)
    assert result.is_error
    reported: list[dict[str, Any]] = []

    async def outcome() -> bool:
        async with node.client() as client:
            events = (await client.get("/audit", params={"limit": 500})).json()["items"]
        reported[:] = [e for e in events
                       if e["approval_id"] == item["id"] and e["kind"] == "outcome"]
        return bool(reported)

    await eventually(outcome, 30, "the outcome")
    assert reported[0]["decision"] == "error"
    assert "missing.txt" in (reported[0]["reason"] or ""), reported[0]
