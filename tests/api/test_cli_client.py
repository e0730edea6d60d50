"""`signoff tasks|show|approve|deny|grants` against a real daemon app on uvicorn."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from signoff.cli.client import register
from tests.api.helpers import BOB_KEY, KEY, Running, serve, wait_state, webhook_steps
from tests.fakes.http_echo import HttpEcho

app = typer.Typer()
register(app)


async def run(*args: str, env: dict[str, str] | None = None) -> Result:
    """Invoke the CLI in a thread (the server runs on this event loop)."""
    runner = CliRunner()
    environment = {"SIGNOFF_URL": "", "SIGNOFF_API_KEY": "", "COLUMNS": "200", **(env or {})}
    return await asyncio.to_thread(runner.invoke, app, list(args), env=environment)


@pytest.fixture
async def base(node: Running) -> AsyncIterator[str]:
    async with serve(node.app) as url:
        yield url


async def real_cli(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """The real `signoff` command in a subprocess, on a terminal COLUMNS wide."""
    env = {**os.environ, "COLUMNS": str(columns), "SIGNOFF_URL": "", "SIGNOFF_API_KEY": ""}
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "signoff", *args], capture_output=True,
        text=True, timeout=60, check=False, env=env)


def whole_in_lines(word: str, output: str) -> bool:
    """``word`` appears unbroken on one line of ``output``."""
    return any(word in line for line in output.splitlines())


async def waiting(node: Running, echo: HttpEcho, goal: str = "ping the hook",
                  path: str = "/hook") -> str:
    async with node.client() as client:
        response = await client.post("/tasks", json={
            "goal": goal, "steps": webhook_steps(echo.url(path))})
        await wait_state(client, response.json()["id"], "waiting_approval")
        return str(response.json()["id"])


async def test_tasks_lists_as_a_table_and_as_json(node: Running, base: str,
                                                  echo: HttpEcho) -> None:
    """`signoff tasks` prints a table for people and JSON with --json."""
    task_id = await waiting(node, echo)
    table = await run("tasks", "--url", base, "--api-key", KEY)
    assert table.exit_code == 0, table.output
    assert task_id in table.output and "waiting_approval" in table.output
    assert "send_webhook" in table.output
    scripted = await run("tasks", "--json", "--state", "waiting_approval",
                         env={"SIGNOFF_URL": base, "SIGNOFF_API_KEY": KEY})
    assert scripted.exit_code == 0
    assert [t["id"] for t in json.loads(scripted.stdout)["items"]] == [task_id]
    empty = await run("tasks", "--state", "completed", "--url", base, "--api-key", KEY)
    assert empty.exit_code == 0 and "no tasks" in empty.output


async def test_show_approve_and_deny(node: Running, base: str, echo: HttpEcho) -> None:
    """show prints the pending action; approve and deny decide as the key's holder."""
    first = await waiting(node, echo)
    shown = await run("show", first, "--url", base, "--api-key", KEY)
    assert shown.exit_code == 0
    assert shown.output.splitlines()[0] == f"{first}  waiting_approval", shown.output
    assert "waiting on: SEND send_webhook" in shown.output
    as_json = await run("show", first, "--json", "--url", base, "--api-key", KEY)
    assert json.loads(as_json.stdout)["id"] == first
    approved = await run("approve", first, "--scope", "session", "--url", base,
                         "--api-key", BOB_KEY)
    assert approved.exit_code == 0, approved.output
    assert f"approved {first} (session)" in approved.output
    async with node.client() as client:
        done = await wait_state(client, first, "completed")
    assert done["actions"][0]["decided_by"] == "web:bob"
    second = await waiting(node, echo)
    denied = await run("deny", second, "--reason", "not now", "--url", base, "--api-key", KEY)
    assert denied.exit_code == 0
    assert "user denied: not now" in denied.output


async def test_cli_decisions_are_audited_as_made_in_the_cli(node: Running, base: str,
                                                            echo: HttpEcho) -> None:
    """`signoff approve` is audited with channel "cli" (the key's holder stays the actor);
    the same decision over plain HTTP stays "web"."""
    first = await waiting(node, echo)
    approved = await run("approve", first, "--url", base, "--api-key", BOB_KEY)
    assert approved.exit_code == 0, approved.output
    second = await waiting(node, echo)
    async with node.client() as client:
        response = await client.post(f"/tasks/{second}/deny", json={},
                                     headers={"Authorization": f"Bearer {KEY}"})
        assert response.status_code == 200, response.text
    events = {}
    for task_id in (first, second):
        page = await node.node.store.audit_events(task_id=task_id)
        [decision] = [e for e in page.items if e.kind == "decision"]
        events[task_id] = (decision.actor, decision.channel)
    assert events[first] == ("web:bob", "cli")
    assert events[second][1] == "web"


async def test_http_errors_are_one_line_and_exit_1(node: Running, base: str,
                                                   echo: HttpEcho) -> None:
    """401, 404 and 409 give one clear line on stderr and exit code 1."""
    no_key = await run("tasks", "--url", base)
    assert no_key.exit_code == 1
    assert "the daemon needs an API key: pass --api-key or set SIGNOFF_API_KEY" in no_key.output
    wrong = await run("tasks", "--url", base, "--api-key", "nope")
    assert wrong.exit_code == 1 and "refused the API key" in wrong.output
    missing = await run("show", "t-nope", "--url", base, "--api-key", KEY)
    assert missing.exit_code == 1
    assert "no task t-nope" in missing.output
    task_id = await waiting(node, echo)
    assert (await run("deny", task_id, "--url", base, "--api-key", KEY)).exit_code == 0
    late = await run("approve", task_id, "--url", base, "--api-key", KEY)
    assert late.exit_code == 1
    assert late.output.count("\n") == 1 and "not waiting" in late.output


async def test_a_conflict_is_printed_once(node: Running, base: str, echo: HttpEcho) -> None:
    """A 409 names the task's state once ("is failed, not waiting"), not again as
    "(state: failed)"; a detail that does not name it gets it added."""
    task_id = await waiting(node, echo)
    assert (await run("deny", task_id, "--url", base, "--api-key", KEY)).exit_code == 0
    late = await run("approve", task_id, "--url", base, "--api-key", KEY)
    assert late.output == f"error: task {task_id} is failed, not waiting for approval\n"
    other = await waiting(node, echo)
    moved = await run("approve", other, "--approval", "a-other", "--url", base,
                      "--api-key", KEY)
    assert moved.exit_code == 1
    assert moved.output.rstrip().endswith("look at the new request first "
                                          "(state: waiting_approval)"), moved.output


async def test_usage_errors_exit_2() -> None:
    """A bad --scope or --state is a usage error (exit 2)."""
    assert (await run("approve", "t-1", "--scope", "forever")).exit_code == 2
    assert (await run("tasks", "--state", "done")).exit_code == 2
    assert (await run("tasks", "--url", "ftp://x", "--api-key", KEY)).exit_code == 2


async def test_unreachable_daemon_says_how_to_start_it() -> None:
    """With nothing listening, the message names the URL, `signoff daemon start`, and how
    to point the CLI at a daemon started on another port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await run("tasks", "--url", f"http://127.0.0.1:{port}")
    assert result.exit_code == 1
    assert f"cannot reach the signoff daemon at http://127.0.0.1:{port}" in result.output
    assert "signoff daemon start" in result.output
    assert "--url or set SIGNOFF_URL" in result.output


async def test_grants_list_and_revoke(node: Running, base: str, echo: HttpEcho) -> None:
    """`signoff grants` lists session/always grants and --revoke revokes one."""
    task_id = await waiting(node, echo)
    await run("approve", task_id, "--scope", "always", "--url", base, "--api-key", KEY)
    listed = await run("grants", "--json", "--url", base, "--api-key", KEY)
    grants = json.loads(listed.stdout)["items"]
    assert len(grants) == 1 and grants[0]["scope"] == "always"
    table = await run("grants", "--url", base, "--api-key", KEY)
    assert grants[0]["id"] in table.output
    revoked = await run("grants", "--revoke", grants[0]["id"], "--url", base, "--api-key", KEY)
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    unknown = await run("grants", "--revoke", "g-nope", "--url", base, "--api-key", KEY)
    assert unknown.exit_code == 1 and "no grant g-nope" in unknown.output


LONG_GOAL = "ping the hook of the release pipeline and tell everyone who cares about it"


async def test_tasks_table_keeps_ids_and_states_whole_at_80_columns(
        node: Running, base: str, echo: HttpEcho) -> None:
    """At 80 columns `signoff tasks` cuts goals with "…", never an id or a state (no
    `waiting_appro`), and wraps nothing."""
    ids = [await waiting(node, echo, LONG_GOAL, "/a/rather/long/path/to/the/hook/endpoint")
           for _ in range(2)]
    result = await real_cli("tasks", "--url", base, "--api-key", KEY)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), result.stdout
    for task_id in ids:
        assert whole_in_lines(f"{task_id}  waiting_approval", result.stdout), result.stdout
    assert "Updated (UTC)" in lines[0]
    assert len(lines) == 3 and "ping the hook…" in result.stdout  # one line each, cut


async def test_grants_show_what_they_cover_and_ended_session_grants(
        node: Running, base: str, echo: HttpEcho) -> None:
    """`signoff grants` at 80 columns: whole ids, tool and targets, and a session grant
    of a finished task is `ended`, not live (its JSON status too)."""
    session_task = await waiting(node, echo)
    await run("approve", session_task, "--scope", "session", "--url", base, "--api-key", KEY)
    async with node.client() as client:
        await wait_state(client, session_task, "completed")
    always_task = await waiting(node, echo, path="/always")
    await run("approve", always_task, "--scope", "always", "--url", base, "--api-key", KEY)
    listed = json.loads((await run("grants", "--json", "--url", base, "--api-key", KEY)).stdout)
    by_scope = {g["scope"]: g for g in listed["items"]}
    assert by_scope["session"]["status"] == "ended" and by_scope["always"]["status"] == "live"
    assert by_scope["always"]["targets"] == [echo.url("/always")]
    result = await real_cli("grants", "--url", base, "--api-key", KEY)
    assert result.returncode == 0, result.stderr
    assert all(len(line.rstrip()) <= 80 for line in result.stdout.splitlines()), result.stdout
    session, always = by_scope["session"]["id"], by_scope["always"]["id"]
    assert whole_in_lines(f"{session}  session", result.stdout), result.stdout
    assert whole_in_lines(f"{always}  always", result.stdout)
    assert "SEND send_" in result.stdout and "…" in result.stdout  # cut, never wrapped
    session_line = next(line for line in result.stdout.splitlines() if session in line)
    always_line = next(line for line in result.stdout.splitlines() if always in line)
    assert " ended " in session_line and " live " in always_line


async def test_approve_and_deny_take_an_approval_id(node: Running, base: str) -> None:
    """`signoff approve a-…` and `signoff deny a-…` decide requests of outside agents."""
    ask = {"tool": "post_message", "args": {"channel": "#ops", "text": "deploying"},
           "requester": "ci:deploy", "policy_id": "run-7"}
    async with node.client(BOB_KEY) as client:  # the agent asks; the admin decides
        first = (await client.post("/v1/approvals", json=ask)).json()["id"]
        # Another channel: an identical request would share the first one's card.
        other = {**ask, "args": {**ask["args"], "channel": "#dev"}}
        second = (await client.post("/v1/approvals", json=other)).json()["id"]
    approved = await run("approve", first, "--scope", "session", "--url", base,
                         "--api-key", KEY)
    assert approved.exit_code == 0, approved.output
    assert f"approved {first} (session); the request is approved" in approved.output
    denied = await run("deny", second, "--reason", "no", "--json", "--url", base,
                       "--api-key", KEY)
    assert denied.exit_code == 0
    assert json.loads(denied.stdout)["status"] == "denied"
    unknown = await run("approve", "a-nope", "--url", base, "--api-key", KEY)
    assert unknown.exit_code == 1 and "no approval request a-nope" in unknown.output
    late = await run("approve", second, "--url", base, "--api-key", KEY)
    assert late.exit_code == 1 and "already denied" in late.output


async def test_approve_for_time_boxes_the_grant_and_grants_shows_until_when(
        node: Running, base: str, echo: HttpEcho) -> None:
    """`signoff approve --scope always --for 8h`: the grant lapses 8 h after the decision,
    and `signoff grants` says until when at 80 columns; `--for` on once is refused."""
    once = await waiting(node, echo)
    refused = await run("approve", once, "--for", "8h", "--url", base, "--api-key", KEY)
    assert refused.exit_code != 0 and "for" in refused.output
    task_id = await waiting(node, echo, path="/always")
    await run("approve", task_id, "--scope", "always", "--for", "8h", "--url", base,
              "--api-key", KEY)
    listed = json.loads((await run("grants", "--json", "--url", base, "--api-key", KEY)).stdout)
    [grant] = [g for g in listed["items"] if g["scope"] == "always"]
    assert grant["expires_at"] is not None and grant["status"] == "live"
    result = await real_cli("grants", "--url", base, "--api-key", KEY)
    assert "live until" in result.stdout and grant["expires_at"][:10] in result.stdout
    assert all(len(line.rstrip()) <= 80 for line in result.stdout.splitlines()), result.stdout


async def test_approve_by_task_id_names_the_request_it_looked_at(
        node: Running, echo: HttpEcho) -> None:
    """`signoff approve/deny t-…` send the approval id they fetched (or the one given
    with --approval); a stale one decides nothing."""
    sent: list[dict[str, object]] = []

    async def recorder(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            message = await receive()
            sent.append(json.loads(message.get("body") or b"{}"))
            replayed = False

            async def again() -> Any:
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return message
            await node.app(scope, again, send)
            return
        await node.app(scope, receive, send)

    async with node.client() as client:
        response = await client.post("/tasks", json={
            "goal": "two", "steps": webhook_steps(echo.url("/hook")) * 2})
        task = await wait_state(client, response.json()["id"], "waiting_approval")
    first = task["approval"]["id"]
    async with serve(recorder) as url:  # type: ignore[arg-type]
        approved = await run("approve", task["id"], "--url", url, "--api-key", KEY)
        assert approved.exit_code == 0, approved.output
        assert sent[-1] == {"scope": "once", "approval_id": first}
        async with node.client() as client:
            later = await wait_state(client, task["id"], "waiting_approval")
            while later["approval"]["id"] == first:
                later = await wait_state(client, task["id"], "waiting_approval")
        stale = await run("deny", task["id"], "--approval", first, "--url", url,
                          "--api-key", KEY)
        assert stale.exit_code == 1 and later["approval"]["id"] in stale.output
        async with node.client() as client:
            assert (await client.get(f"/tasks/{task['id']}")).json()["approval"]["status"] \
                == "pending"
        denied = await run("deny", task["id"], "--url", url, "--api-key", KEY)
        assert denied.exit_code == 0, denied.output
        assert sent[-1] == {"reason": None, "approval_id": later["approval"]["id"]}
