"""`signoff claude-hook`, Claude Code's PreToolUse command hook, fed the hook JSON Claude
Code documents (input on stdin, decision on stdout) against a daemon app on uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from signoff.cli.claude_hook import run_hook
from signoff.cli.claude_tools import call_digest
from tests.api.asking import AGENT_KEY, asked, decide, decide_first, pending


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def hook_input(project: Path, tool: str, args: dict[str, Any],
               session: str = "sess-1") -> str:
    return json.dumps({"session_id": session, "transcript_path": "/dev/null",
                       "cwd": str(project), "permission_mode": "default",
                       "hook_event_name": "PreToolUse", "tool_name": tool,
                       "tool_input": args, "tool_use_id": "toolu_01"})


async def hook(url: str, text: str, state: Path, wait: float) -> tuple[str, str]:
    """Run the hook in a thread (it is synchronous, as the CLI runs it): decision, reason."""
    out = await asyncio.to_thread(run_hook, text, url=url, api_key=AGENT_KEY, wait=wait,
                                  state_root=state)
    spec = out["hookSpecificOutput"]
    assert spec["hookEventName"] == "PreToolUse"
    return spec["permissionDecision"], spec["permissionDecisionReason"]


async def test_a_read_inside_the_project_is_allowed_at_once(daemon, project: Path,
                                                          tmp_path: Path) -> None:
    """READ is settled by the policy: allow, nobody asked."""
    node, url = daemon
    (project / "a.txt").write_text("x")
    decision, _ = await hook(url, hook_input(project, "Read", {"file_path": "a.txt"}),
                             tmp_path / "state", wait=5)
    assert decision == "allow"
    assert await pending(node) == []


async def test_a_person_who_answers_in_time_gets_allow(daemon, project: Path,
                                                      tmp_path: Path) -> None:
    """A write outside the project waits for the person; their approval is allow."""
    node, url = daemon
    text = hook_input(project, "Write", {"file_path": str(tmp_path / "out.txt"),
                                         "content": "x"})
    call = asyncio.create_task(hook(url, text, tmp_path / "state", wait=60))
    await decide_first(node, "approve")
    decision, reason = await call
    assert decision == "allow" and "approved" in reason


async def test_a_denial_is_deny_with_the_reason(daemon, project: Path, tmp_path: Path) -> None:
    """The person's reason reaches Claude in permissionDecisionReason."""
    node, url = daemon
    text = hook_input(project, "Bash", {"command": "rm -rf build"})
    call = asyncio.create_task(hook(url, text, tmp_path / "state", wait=60))
    await decide_first(node, "deny", {"reason": "not today"})
    decision, reason = await call
    assert decision == "deny" and "not today" in reason


async def test_a_call_still_pending_is_denied_and_made_again_gets_the_answer(
        daemon, project: Path, tmp_path: Path) -> None:
    """Nobody answers within --wait: deny, never defer (Claude Code ignores defer in an
    interactive session, for one of several parallel calls and before 2.1.89, and then
    its own permission flow may run the call). The person approves later; the same call
    made again is allowed on that request (no second card), and a Once is used up."""
    node, url = daemon
    text = hook_input(project, "Bash", {"command": "make deploy"})
    state = tmp_path / "state"
    decision, reason = await hook(url, text, state, wait=0.3)
    assert decision == "deny" and "still pending" in reason and "did not run" in reason
    [item] = await pending(node)
    await decide_first(node, "approve")
    decision, _ = await hook(url, text, state, wait=5)
    assert decision == "allow"
    assert await pending(node) == []
    # The same command once more: the Once was used, a person is asked again.
    decision, _ = await hook(url, text, state, wait=0.3)
    assert decision == "deny"
    [again] = await pending(node)
    assert again["id"] != item["id"]


async def test_an_edited_state_file_cannot_borrow_another_calls_approval(
        daemon, project: Path, tmp_path: Path) -> None:
    """The hook's file of asked requests lies where Claude may write. Pointing a
    dangerous call's entry at an approved harmless request (its id, or the key it was
    asked with) gets the dangerous call its own card, never that approval."""
    node, url = daemon
    state = tmp_path / "state"
    harmless = hook_input(project, "Bash", {"command": "make lint"})
    assert (await hook(url, harmless, state, wait=0.3))[0] == "deny"
    [asked] = list((state).glob("*.json"))
    [harmless_key] = json.loads(asked.read_text()).values()
    [item] = await pending(node)
    await decide_first(node, "approve")
    dangerous_args = {"command": "rm -rf ~/important"}
    digest = call_digest("sess-1", "Bash", dangerous_args)
    for borrowed in (item["id"], harmless_key):
        asked.write_text(json.dumps({digest: borrowed}))
        decision, _ = await hook(url, hook_input(project, "Bash", dangerous_args), state,
                                 wait=0.3)
        assert decision == "deny"
    waiting = await pending(node)
    assert waiting and all(w["id"] != item["id"] for w in waiting)
    assert all("rm -rf" in json.dumps(w) for w in waiting)


async def test_two_identical_calls_at_once_are_two_requests(
        daemon, project: Path, tmp_path: Path) -> None:
    """Claude may run two identical calls at the same time: each is a request of its own
    (their shared card says "2 identical requests"), so a Once on one of them lets one
    run, not both."""
    node, url = daemon
    text = hook_input(project, "Bash", {"command": "make release"})
    state = tmp_path / "state"
    first = asyncio.create_task(hook(url, text, state, wait=8))
    await asked(node, 1)
    second = asyncio.create_task(hook(url, text, state, wait=8))
    both = await asked(node, 2)
    assert len({item["id"] for item in both}) == 2
    await decide(node, both[1]["id"], "approve")
    results = sorted([(await first)[0], (await second)[0]])
    assert results == ["allow", "deny"]


async def test_an_unreachable_daemon_is_deny(project: Path, tmp_path: Path) -> None:
    """Fail closed: no daemon, deny (never allow, never ask)."""
    decision, reason = await hook("http://127.0.0.1:9", hook_input(
        project, "Bash", {"command": "ls"}), tmp_path / "state", wait=1)
    assert decision == "deny" and "unreachable" in reason


@pytest.mark.parametrize("text, words", [
    ("not json", "bad hook input"),
    (json.dumps({"session_id": "s", "tool_name": "Bash", "tool_input": "ls"}),
     "tool_input is not an object"),
    (json.dumps({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Bash"}),
     "PreToolUse hook"),
])
def test_bad_hook_input_is_deny_naming_the_problem(text: str, words: str,
                                                   tmp_path: Path) -> None:
    """Input the hook cannot read is denied, and the reason says what was wrong."""
    out = run_hook(text, url="http://127.0.0.1:9", api_key=None, wait=0,
                   state_root=tmp_path)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny" and words in out["permissionDecisionReason"]


@contextlib.asynccontextmanager
async def silent_daemon() -> AsyncIterator[str]:
    """A daemon that accepts connections and reads requests but never answers (stalled,
    or overloaded): its URL."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the hook goes away

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_a_daemon_that_never_answers_is_deny_within_the_wait(project: Path,
                                                                   tmp_path: Path) -> None:
    """Claude Code kills a hook that outlives its `timeout` and then lets the call run,
    so the hook must answer before then even when the daemon accepts and never answers:
    `--wait` bounds the whole hook, and the answer is deny."""
    async with silent_daemon() as url:
        began = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "signoff", "claude-hook", "--url", url, "--wait", "2s",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "XDG_STATE_HOME": str(tmp_path)})
        out, err = await asyncio.wait_for(proc.communicate(hook_input(
            project, "Bash", {"command": "rm -rf build"}).encode()), 120)
        took = time.monotonic() - began
    assert proc.returncode == 0, err.decode()
    answer = json.loads(out)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny"
    assert "did not answer within 2s" in answer["permissionDecisionReason"]
    # 2 s of --wait, 2 s of grace, and the interpreter's start (a minute is Claude's
    # usual hook timeout; before, this took the SDK's two 10 s read timeouts and more).
    assert took < 15, took


def test_the_command_reads_stdin_and_prints_the_decision(project: Path) -> None:
    """`signoff claude-hook` as Claude runs it: JSON on stdin, JSON on stdout, exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "signoff", "claude-hook", "--url", "http://127.0.0.1:9",
         "--wait", "1s"], input=hook_input(project, "Bash", {"command": "ls"}),
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"


async def test_mcp_permission_answers_still_pending_before_claude_gives_up(
        daemon, project: Path) -> None:
    """mcp-permission does not outwait Claude Code's ~5 minute limit: past its own wait it
    denies with "still pending … retry", and Claude's retry of the same call lands on the
    same request, which the person approved meanwhile."""
    from signoff.cli.permission import PermissionPrompts
    from signoff.client import Signoff

    node, url = daemon
    args = {"command": "make deploy"}
    async with Signoff(url, api_key=AGENT_KEY) as client:
        prompts = PermissionPrompts(client, cwd=project, wait_limit=0.3, progress_every=0.3)
        first = json.loads(await prompts.answer("Bash", args, tool_use_id="toolu_1"))
        assert first["behavior"] == "deny" and "still pending" in first["message"]
        await decide_first(node, "approve")
        again = json.loads(await prompts.answer("Bash", args, tool_use_id="toolu_2"))
    assert again == {"behavior": "allow", "updatedInput": args}
    assert await pending(node) == []
