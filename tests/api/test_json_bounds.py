"""JSON nested deeper than 32 levels never gets in: API bodies, outside requests, explicit
steps and a model's tool calls are refused naming the field, and the daemon goes on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.runtime.bounds import MAX_DEPTH
from tests.agentkit import NOTES
from tests.api.helpers import Running, make_settings, running_node, wait_state
from tests.fakes.openai import Answer, FakeOpenAI, steps

HOOK = "https://hooks.example.com/x"


def nested(levels: int) -> dict[str, Any]:
    """An object ``levels`` deep: {"a": {"a": … "x" …}}."""
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return dict(value)


def outside(args: dict[str, Any], tool: str = "send_webhook") -> dict[str, Any]:
    return {"tool": tool, "args": args, "requester": "agent", "policy_id": "s-1"}


async def still_serving(client: httpx.AsyncClient) -> None:
    """The pending list, the console and a fresh request all answer."""
    assert (await client.get("/approvals")).status_code == 200
    assert (await client.get("/")).status_code == 200
    read = await client.post("/v1/approvals", json=outside({"path": "a.txt"}, "read_file"))
    assert read.status_code == 200 and read.json()["status"] == "approved", read.text


async def test_a_request_nested_220_deep_is_refused_naming_the_field(
        client: httpx.AsyncClient) -> None:
    """POST /v1/approvals with args 220 levels deep is a 422 naming args (it was stored,
    and the pending list answered 500 from then on)."""
    answer = await client.post("/v1/approvals",
                               json=outside({"url": HOOK, "payload": nested(220)}))
    assert answer.status_code == 422, answer.text
    field = answer.json()["errors"][0]["field"]
    assert field.startswith("args.payload") and "32 levels" in answer.json()["detail"]
    await still_serving(client)


async def test_every_body_is_bounded_and_32_levels_still_pass(
        client: httpx.AsyncClient) -> None:
    """Steps, an approval's edited args and any body deeper than 32 levels are 422s naming
    the field; a body exactly 32 levels deep is accepted."""
    deep_step = {"goal": "g", "steps": [{"tool": "send_webhook",
                                         "args": {"url": HOOK, "payload": nested(40)}}]}
    answer = await client.post("/tasks", json=deep_step)
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"].startswith(
        "steps[0].args"), answer.text
    edited = await client.post("/approvals/a-x/approve", json={"args": nested(60)})
    assert edited.status_code == 422 and edited.json()["errors"][0]["field"].startswith("args")
    raw = await client.post("/tasks", content=b"[" * 100_000,
                            headers={"Content-Type": "application/json"})
    assert raw.status_code == 422 and "32 levels" in raw.json()["detail"]
    # body {1} → args {2} → payload {3} → 29 more levels: 32 in all.
    fits = await client.post("/v1/approvals", json=outside(
        {"url": HOOK, "payload": nested(MAX_DEPTH - 3)}))
    assert fits.status_code == 202, fits.text
    listed = (await client.get("/approvals")).json()["items"]
    assert [i["id"] for i in listed] == [fits.json()["id"]]


DEEP_CALL = steps(
    Answer(content="Posting it.", calls=[("send_webhook", {"url": HOOK,
                                                            "payload": nested(200)})]),
    Answer(content="The payload was refused; stopping."))


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(script=DEEP_CALL) as fake:
        yield fake


@pytest.fixture
async def agent(tmp_path: Path, llm: FakeOpenAI) -> AsyncIterator[Running]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    settings = make_settings(work, planner={"kind": "openai", "base_url": llm.base_url,
                                            "model": "llama3.1", "timeout": "5s"})
    async with running_node(work, settings=settings) as running:
        yield running


async def test_a_model_tool_call_nested_too_deep_is_a_tool_error(
        agent: Running, llm: FakeOpenAI) -> None:
    """An agent's tool call 200 levels deep comes back to the model as a tool error naming
    the arguments; nobody is asked, and the pending list and the console keep answering."""
    async with agent.client() as client:
        task_id = (await client.post("/tasks", json={"goal": "post it"})).json()["id"]
        done = await wait_state(client, task_id, "completed", "failed")
        assert done["state"] == "completed", done
        await still_serving(client)
        assert (await client.get("/approvals")).json()["items"] == []
    tool_messages = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    error = json.loads(tool_messages[-1]["content"])["error"]
    assert "arguments" in error and "nested deeper than 32 levels" in error


async def test_a_planned_tool_call_nested_too_deep_fails_the_plan_with_the_reason(
        tmp_path: Path, llm: FakeOpenAI) -> None:
    """In plan mode a tool call 200 levels deep fails planning with the reason; nothing
    that deep is stored, and the daemon keeps answering."""
    work = tmp_path / "work"
    settings = make_settings(work, planner={"kind": "openai", "base_url": llm.base_url,
                                            "model": "llama3.1", "timeout": "5s",
                                            "mode": "plan"},
                             daemon={"work_dir": str(work), "host": "127.0.0.1",
                                     "node_id": "test-node", "max_retries": 0})
    async with running_node(work, settings=settings) as node, node.client() as client:
        task_id = (await client.post("/tasks", json={"goal": "post it"})).json()["id"]
        failed = await wait_state(client, task_id, "failed")
        assert "nested deeper than 32 levels" in json.dumps(failed["result"])
        await still_serving(client)
