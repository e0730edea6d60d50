"""An agent task seen from outside: its transcript over the API, `signoff show
--transcript`, the console's conversation, and a card that quotes the model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from signoff.cli.client import register
from tests.agentkit import NOTES
from tests.api.helpers import KEY, Running, make_settings, running_node, serve, wait_state
from tests.fakes.openai import Answer, FakeOpenAI, steps

BIG = "x" * 5_000 + "END"
SCRIPT = steps(
    Answer(content="First I read the notes.", calls=[("read_file", {"path": "notes.txt"}),
                                                     ("read_file", {"path": "big.txt"})]),
    Answer(content="The notes say the meeting moved; deleting the old file as asked.",
           calls=[("delete_file", {"path": "big.txt"})]),
    Answer(content="Deleted big.txt."))

cli = typer.Typer()
register(cli)


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(script=SCRIPT) as fake:
        yield fake


@pytest.fixture
async def agent(tmp_path: Path, llm: FakeOpenAI) -> AsyncIterator[Running]:
    """A running node in agent mode with a notes file and a big file in its work dir."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    (work / "big.txt").write_text(BIG)
    settings = make_settings(work, planner={"kind": "openai", "base_url": llm.base_url,
                                            "model": "llama3.1", "timeout": "5s"})
    async with running_node(work, settings=settings) as running:
        yield running


async def waiting_task(agent: Running) -> str:
    async with agent.client() as client:
        response = await client.post("/tasks", json={"goal": "tidy up after reading notes"})
        task_id = str(response.json()["id"])
        await wait_state(client, task_id, "waiting_approval")
    return task_id


async def test_transcript_route_pages_the_conversation_oldest_first(agent: Running) -> None:
    """GET /tasks/{id}/transcript gives every message with its role, calls and ids, page
    by page; tool outputs are shortened; an unknown task is a 404."""
    task_id = await waiting_task(agent)
    async with agent.client() as client:
        first = (await client.get(f"/tasks/{task_id}/transcript", params={"limit": 3})).json()
        assert [i["role"] for i in first["items"]] == ["system", "user", "assistant"]
        assert first["items"][1]["content"] == "tidy up after reading notes"
        calls = first["items"][2]["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["read_file", "read_file"]
        assert json.loads(calls[0]["function"]["arguments"]) == {"path": "notes.txt"}
        assert first["next_cursor"] == "2"
        rest = (await client.get(f"/tasks/{task_id}/transcript",
                                 params={"cursor": first["next_cursor"]})).json()
        assert [i["role"] for i in rest["items"]] == ["tool", "tool", "assistant"]
        assert rest["next_cursor"] is None
        assert [i["tool_call_id"] for i in rest["items"][:2]] == [c["id"] for c in calls]
        assert json.loads(rest["items"][0]["content"])["content"] == NOTES
        big = rest["items"][1]["content"]
        assert "END" not in big and big.endswith("more characters]") and len(big) < 1_100
        assert all(i["at"] for i in first["items"] + rest["items"])
        missing = await client.get("/tasks/t-missing/transcript")
        assert missing.status_code == 404
        fixed = await client.post("/tasks", json={"goal": "list", "steps": [
            {"tool": "list_dir", "args": {"path": "."}}]})
        fixed_id = fixed.json()["id"]
        await wait_state(client, fixed_id, "completed")
        empty = (await client.get(f"/tasks/{fixed_id}/transcript")).json()
        assert empty == {"items": [], "next_cursor": None}


async def test_the_card_quotes_the_model_and_the_approval_list_too(agent: Running) -> None:
    """The pending request carries the model's words from the proposing turn, labelled
    on the console card as the agent's."""
    task_id = await waiting_task(agent)
    words = "The notes say the meeting moved; deleting the old file as asked."
    async with agent.client() as client:
        pending = (await client.get("/approvals")).json()["items"]
        assert [p["why"] for p in pending] == [words]
        page = (await client.get(f"/console/tasks/{task_id}")).text
    assert f'<p class="why">Why (agent): {words}</p>' in page


async def test_console_task_page_shows_the_conversation(agent: Running) -> None:
    """The console's task page lists the messages, with tool outputs cut short."""
    task_id = await waiting_task(agent)
    async with agent.client() as client:
        await client.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
        await wait_state(client, task_id, "completed")
        page = (await client.get(f"/console/tasks/{task_id}")).text
    assert "<h2>Conversation</h2>" in page
    assert 'class="msg role-assistant"' in page and "Deleted big.txt." in page
    assert "read_file({&quot;path&quot;: &quot;notes.txt&quot;})" in page
    assert "more characters]" in page and "END" not in page


async def test_show_transcript_prints_the_conversation(agent: Running, llm: FakeOpenAI) -> None:
    """`signoff show ID --transcript` prints who said what; --json adds the items."""
    task_id = await waiting_task(agent)
    async with serve(agent.app) as base:
        shown = await run_cli("show", task_id, "--transcript", "--url", base, "--api-key", KEY)
        scripted = await run_cli("show", task_id, "--transcript", "--json", "--url", base,
                                 "--api-key", KEY)
    assert shown.exit_code == 0, shown.output
    assert "conversation" in shown.output
    assert "[user] tidy up after reading notes" in shown.output
    assert '[assistant] → read_file({"path": "notes.txt"})' in shown.output
    assert "[tool call_1_0]" in shown.output
    data = json.loads(scripted.stdout)
    assert data["id"] == task_id and len(data["transcript"]) == 6
    assert len(llm.requests) == 2


async def run_cli(*args: str) -> Result:
    """Invoke the CLI in a thread (the server runs on this event loop)."""
    env = {"SIGNOFF_URL": "", "SIGNOFF_API_KEY": "", "COLUMNS": "200"}
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)
