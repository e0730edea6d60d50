"""POST /approvals/batch: once or deny for several requests, one result per id."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.helpers import (
    BOB_KEY,
    Running,
    running_node,
    wait_state,
    webhook_steps,
)
from tests.fakes.http_echo import HttpEcho

ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice"}


async def outside(client: httpx.AsyncClient, to: str) -> str:
    answer = await client.post("/v1/approvals", json={
        **ASK, "args": {**ASK["args"], "to": to}, "policy_id": "s-1"})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


async def test_batch_approves_once_with_mixed_results(client: httpx.AsyncClient,
                                                      agent: httpx.AsyncClient,
                                                      echo: HttpEcho) -> None:
    """Pending ids are approved once (200), an unknown one is 404, a decided one 409;
    the task of an approved request runs; no session or always grant is made."""
    first, second = await outside(agent, "a@example.com"), await outside(agent, "b@x.org")
    task = await client.post("/tasks", json={"goal": "hook",
                                             "steps": webhook_steps(echo.url("/hook"))})
    task_id = task.json()["id"]
    waiting = await wait_state(client, task_id, "waiting_approval")
    done = await outside(client, "c@example.com")
    assert (await client.post(f"/approvals/{done}/deny")).status_code == 200
    ids = [first, waiting["approval"]["id"], "a-nope", done, second]
    answer = await client.post("/approvals/batch", json={"ids": ids, "decision": "once"})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [(r["id"], r["status"]) for r in results] == [
        (first, 200), (ids[1], 200), ("a-nope", 404), (done, 409), (second, 200)]
    assert all(isinstance(r["detail"], str) and r["detail"] for r in results)
    for approval_id in (first, second):
        status = (await client.get(f"/v1/approvals/{approval_id}")).json()
        assert status["status"] == "approved" and status["scope"] == "once"
    await wait_state(client, task_id, "completed")
    grants = (await client.get("/grants")).json()["items"]
    assert {g["scope"] for g in grants} <= {"once"}


async def test_batch_deny_keeps_the_reason(client: httpx.AsyncClient) -> None:
    """A batch deny denies each request with the reason given."""
    ids = [await outside(client, "a@example.com"), await outside(client, "b@example.com")]
    answer = await client.post("/approvals/batch",
                               json={"ids": ids, "decision": "deny", "reason": "not today"})
    assert [r["status"] for r in answer.json()["results"]] == [200, 200]
    for approval_id in ids:
        status = (await client.get(f"/v1/approvals/{approval_id}")).json()
        assert status["status"] == "denied" and status["reason"] == "not today"


@pytest.mark.parametrize("decision", ["session", "always", "maybe"])
async def test_batch_refuses_any_other_decision_and_decides_nothing(
        client: httpx.AsyncClient, decision: str) -> None:
    """session, always or anything else: 422 naming the field, every request still pending."""
    approval_id = await outside(client, "a@example.com")
    answer = await client.post("/approvals/batch",
                               json={"ids": [approval_id], "decision": decision})
    assert answer.status_code == 422
    assert "decision" in answer.text
    status = (await client.get(f"/v1/approvals/{approval_id}")).json()
    assert status["status"] == "pending"


@pytest.mark.parametrize("body", [{"ids": [], "decision": "once"}, {"decision": "once"},
                                  {"ids": "a-1", "decision": "deny"}])
async def test_batch_refuses_bad_ids(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    """No ids, or ids that are not a list: 422 naming ``ids``."""
    answer = await client.post("/approvals/batch", json=body)
    assert answer.status_code == 422 and "ids" in answer.text


async def test_batch_is_403_for_a_request_the_caller_may_not_decide(tmp_path: Path) -> None:
    """Bob's own outside request in bob's batch is 403; others pass."""
    async with running_node(tmp_path) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob:
        mine = await outside(bob, "a@example.com")
        theirs = await outside(admin, "b@example.com")
        answer = await bob.post("/approvals/batch",
                                json={"ids": [mine, theirs], "decision": "once"})
        assert [(r["id"], r["status"]) for r in answer.json()["results"]] == [
            (mine, 403), (theirs, 200)]
        assert (await bob.get(f"/v1/approvals/{mine}")).json()["status"] == "pending"


async def test_batch_needs_a_key(node: Running) -> None:
    """Without the API key a batch is 401."""
    async with node.client(key=None) as anonymous:
        answer = await anonymous.post("/approvals/batch", json={"ids": ["a-1"],
                                                                "decision": "once"})
    assert answer.status_code == 401


async def test_a_batch_once_sends_only_the_content_of_the_ids_it_names(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Two tasks post different payloads to one webhook: a batch Once naming the first
    request sends its payload only; the other task still waits for its own answer."""
    tasks = []
    for payload in ({"say": "ship it"}, {"say": "wipe prod"}):
        answer = await client.post("/tasks", json={
            "goal": "hook", "steps": webhook_steps(echo.url("/hook"), payload)})
        tasks.append(answer.json()["id"])
    waiting = [await wait_state(client, t, "waiting_approval") for t in tasks]
    shown = waiting[0]["approval"]["id"]
    answer = await client.post("/approvals/batch", json={"ids": [shown], "decision": "once"})
    assert [r["status"] for r in answer.json()["results"]] == [200]
    await wait_state(client, tasks[0], "completed")
    assert [r.json() for r in echo.requests if r.path == "/hook"] == [{"say": "ship it"}]
    assert (await client.get(f"/tasks/{tasks[1]}")).json()["state"] == "waiting_approval"
