"""The HTTP API of the contract, in process through httpx.ASGITransport, on a real node."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.runtime.models import TaskState
from tests.api.helpers import (
    BOB_KEY,
    Running,
    make_settings,
    running_node,
    stop_all,
    wait_state,
    webhook_steps,
)
from tests.fakes.http_echo import HttpEcho

TASK_KEYS = {"id", "state", "goal", "result", "pending_action", "approval", "actions",
             "retries", "schedule", "created_at", "updated_at"}
AUDIT_KEYS = {"id", "at", "task_id", "approval_id", "kind", "decision", "scope", "actor",
              "tool", "targets", "risk", "fingerprint", "reason", "prev_hash", "hash"}


async def submit(client: httpx.AsyncClient, **body: Any) -> str:
    response = await client.post("/tasks", json={"goal": "test goal", **body})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def waiting(client: httpx.AsyncClient, echo: HttpEcho, **extra: Any) -> str:
    task_id = await submit(client, steps=webhook_steps(echo.url("/hook")), **extra)
    await wait_state(client, task_id, "waiting_approval")
    return task_id


def hooks(echo: HttpEcho) -> int:
    return sum(1 for r in echo.requests if r.path == "/hook")


async def test_health_answers_without_a_key(node: Running) -> None:
    """GET /health needs no key and names the version and the node."""
    async with node.client(key=None) as anonymous:
        response = await anonymous.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["version"]
    assert body["node"] == "test-node"


async def test_health_is_degraded_by_a_disabled_surface_or_a_down_mcp_server(
        tmp_path: Path) -> None:
    """A surface left out at start or an MCP server down makes /health "degraded" (200),
    each named in problems; a node with every part working says "ok"."""
    parts = {"surfaces": {"web": "ok", "slack": "disabled: slack.bot_token refused"},
             "mcp": {"git": "down: exited 1", "time": "up"}}
    async with running_node(tmp_path / "work", surfaces=None,
                            mcp_status=lambda: dict(parts["mcp"])) as node, \
            node.client(key=None) as anonymous:
        node.ctx.surfaces = lambda: dict(parts["surfaces"])
        body = (await anonymous.get("/health")).json()
        assert body["status"] == "degraded"
        assert "surface slack: disabled: slack.bot_token refused" in body["problems"]
        assert "mcp server git: down: exited 1" in body["problems"]
        assert not [p for p in body["problems"] if "time" in p or "web" in p]
        parts.update(surfaces={"web": "ok"}, mcp={"git": "up"})
        assert (await anonymous.get("/health")).json()["status"] == "ok"


async def test_submit_answers_202_at_once_without_waiting_for_work(
        tmp_path: Path, echo: HttpEcho) -> None:
    """POST /tasks returns 202 {"id"} immediately even when the work takes seconds."""
    # The echo server is on 127.0.0.1: listed, so the read runs without asking.
    settings = make_settings(tmp_path, policy={"net_allow": ["127.0.0.1"]})
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        started = time.monotonic()
        response = await client.post("/tasks", json={
            "goal": "slow read", "steps": [{"tool": "http_get",
                                            "args": {"url": echo.url("/slow?seconds=1.5")}}]})
        elapsed = time.monotonic() - started
        assert response.status_code == 202
        assert set(response.json()) == {"id"}
        assert response.headers["location"] == f"/tasks/{response.json()['id']}"
        assert elapsed < 1.0
        task = (await client.get(f"/tasks/{response.json()['id']}")).json()
        assert task["state"] in ("queued", "in_progress")
        # Let the slow read finish before the echo server shuts down under it.
        await wait_state(client, task["id"], "completed", timeout=15)


async def test_waiting_task_has_the_contract_shape(client: httpx.AsyncClient,
                                                   echo: HttpEcho) -> None:
    """A waiting task shows its pending action and approval in the contract's shape."""
    task_id = await waiting(client, echo)
    task = (await client.get(f"/tasks/{task_id}")).json()
    assert set(task) == TASK_KEYS
    assert task["state"] == "waiting_approval"
    assert task["pending_action"] == {
        "tool": "send_webhook", "args": {"url": echo.url("/hook"), "payload": {"n": 1}},
        "risk": "SEND", "capability": "net.post", "targets": [echo.url("/hook")]}
    assert set(task["approval"]) == {"id", "status", "requested_at", "expires_at"}
    assert task["approval"]["status"] == "pending"
    assert task["actions"] == [] and task["retries"] == 0 and task["schedule"] is None


async def test_completed_result_is_an_object(client: httpx.AsyncClient, node: Running) -> None:
    """`result` is a JSON object, never a JSON-encoded string; actions record each step."""
    (node.node.work_dir / "notes.txt").write_text("hello")
    task_id = await submit(client, steps=[{"tool": "read_file", "args": {"path": "notes.txt"}}])
    task = await wait_state(client, task_id, "completed")
    assert isinstance(task["result"], dict)
    assert task["result"]["outputs"][0]["tool"] == "read_file"
    assert task["actions"][0]["outcome"] == "ok"
    assert task["actions"][0]["risk"] == "READ"


async def test_unknown_task_is_404_everywhere(client: httpx.AsyncClient) -> None:
    """GET, approve and deny of an unknown task answer 404 naming it."""
    for response in (await client.get("/tasks/t-nope"),
                     await client.post("/tasks/t-nope/approve", json={"scope": "once"}),
                     await client.post("/tasks/t-nope/deny", json={})):
        assert response.status_code == 404
        assert response.json() == {"detail": "no task t-nope"}


@pytest.mark.parametrize(("body", "field"), [
    ({"goal": "x", "steps": [{"tool": "launch_rockets", "args": {}}]}, "steps[0].tool"),
    ({"goal": "x", "steps": [{"tool": "send_webhook", "args": {"payload": {}}}]},
     "steps[0].args"),
    ({"goal": "x", "steps": [{"args": {}}]}, "steps[0].tool"),
    ({"goal": 5}, "goal"),
    ({"steps": []}, "goal"),
    ({"goal": "x", "steps": "nope"}, "steps"),
    ({"goal": "x", "schedule": "nightly"}, "schedule"),
    ({"goal": "x", "prohibit": ["SNED"]}, "prohibit[0]"),
    ({"goal": "x", "surprise": 1}, "surprise"),
])
async def test_bad_submissions_are_422_naming_the_field(client: httpx.AsyncClient,
                                                         body: dict[str, Any], field: str) -> None:
    """Unknown tools, missing args, wrong types and unknown fields are 422 naming the field."""
    response = await client.post("/tasks", json=body)
    assert response.status_code == 422, response.text
    data = response.json()
    assert field in [e["field"] for e in data["errors"]]
    assert field in data["detail"]


async def test_bad_json_is_422(client: httpx.AsyncClient) -> None:
    """A body that is not JSON is a 422 naming the body."""
    response = await client.post("/tasks", content=b"{not json",
                                 headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "body"
    assert "Traceback" not in response.text


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain",
                                          None])
@pytest.mark.parametrize("path", ["/tasks", "/tasks/t-nope/approve", "/tasks/t-nope/deny"])
async def test_a_body_not_sent_as_json_is_told_to_send_json(
        client: httpx.AsyncClient, path: str, content_type: str | None) -> None:
    """`curl -d '{…}'` (form-encoded) gets 422 "send application/json", not a pydantic text."""
    headers = {"content-type": content_type} if content_type else {}
    response = await client.post(path, content=b'{"goal": "x", "scope": "once"}',
                                 headers=headers)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "send application/json" in detail, detail
    assert "Content-Type: application/json" in detail
    assert (content_type or "no Content-Type") in detail
    assert "dictionary" not in detail
    assert response.json()["errors"][0]["field"] == "body"


async def test_a_json_body_with_a_charset_is_json(client: httpx.AsyncClient) -> None:
    """`application/json; charset=utf-8` and `+json` types are read as JSON."""
    for kind in ("application/json; charset=utf-8", "application/vnd.api+json"):
        response = await client.post("/tasks", content=b'{"goal": 5}',
                                     headers={"content-type": kind})
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "goal", response.text


async def test_prohibited_action_is_blocked_and_cannot_be_approved(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A step prohibited by the request is blocked; approving it afterwards is 409."""
    task_id = await submit(client, steps=webhook_steps(echo.url("/hook")), prohibit=["SEND"])
    task = await wait_state(client, task_id, "failed")
    assert task["result"]["reason"].startswith("blocked:")
    response = await client.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
    assert response.status_code == 409
    assert response.json()["state"] == "failed"
    assert hooks(echo) == 0


async def test_approve_runs_the_action_and_answers_with_the_task(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Approving answers 200 with the updated task; the action then runs once."""
    task_id = await waiting(client, echo)
    response = await client.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == TASK_KEYS
    assert body["approval"]["status"] == "approved"
    assert body["state"] in ("in_progress", "completed")
    done = await wait_state(client, task_id, "completed")
    assert done["actions"][0]["decided_by"] == "web:admin"
    assert hooks(echo) == 1


async def test_approve_without_body_means_once(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """An approve with no body is an approval for this action only."""
    task_id = await waiting(client, echo)
    response = await client.post(f"/tasks/{task_id}/approve")
    assert response.status_code == 200
    done = await wait_state(client, task_id, "completed")
    assert done["actions"][0]["decision"] == "approved:once"


async def test_second_answer_is_409_with_the_current_state(client: httpx.AsyncClient,
                                                           echo: HttpEcho) -> None:
    """Approve or deny on a task that is no longer waiting is 409 with its state."""
    task_id = await waiting(client, echo)
    assert (await client.post(f"/tasks/{task_id}/deny", json={})).status_code == 200
    again = await client.post(f"/tasks/{task_id}/approve", json={"scope": "always"})
    assert again.status_code == 409
    assert again.json()["state"] == "failed"
    assert "not waiting" in again.json()["detail"]
    deny = await client.post(f"/tasks/{task_id}/deny", json={"reason": "again"})
    assert deny.status_code == 409


async def test_deny_with_a_reason_fails_the_task(client: httpx.AsyncClient,
                                                 echo: HttpEcho) -> None:
    """A deny with a reason fails the task with "user denied: <reason>"; nothing is sent."""
    task_id = await waiting(client, echo)
    response = await client.post(f"/tasks/{task_id}/deny", json={"reason": "not today"})
    assert response.status_code == 200
    assert response.json()["state"] == "failed"
    assert response.json()["result"]["reason"] == "user denied: not today"
    assert hooks(echo) == 0


async def test_unknown_scope_is_422(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A scope outside once|session|always is 422 naming `scope`; the task keeps waiting."""
    task_id = await waiting(client, echo)
    for scope in ("forever", "deny", 3):
        response = await client.post(f"/tasks/{task_id}/approve", json={"scope": scope})
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "scope"
    assert (await client.get(f"/tasks/{task_id}")).json()["state"] == "waiting_approval"


async def test_scope_not_offered_for_the_risk_is_422(tmp_path: Path, echo: HttpEcho) -> None:
    """A scope the config does not offer for this risk class is 422 naming `scope`."""
    settings = make_settings(tmp_path, approvals={"scopes": {"SEND": ["once", "deny"]}})
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        task_id = await waiting(client, echo)
        response = await client.post(f"/tasks/{task_id}/approve", json={"scope": "always"})
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "scope"
        assert "allowed: once, deny" in response.json()["detail"]
        assert (await client.post(f"/tasks/{task_id}/approve",
                                  json={"scope": "once"})).status_code == 200


async def test_named_key_acts_as_web_name(node: Running, echo: HttpEcho) -> None:
    """A [[api.keys]] holder submits and decides as web:<name>, and audit events say so."""
    async with node.client(key=BOB_KEY) as bob:
        task_id = await waiting(bob, echo)
        assert (await bob.post(f"/tasks/{task_id}/approve",
                               json={"scope": "session"})).status_code == 200
        await wait_state(bob, task_id, "completed")
        events = (await bob.get("/audit", params={"task": task_id})).json()["items"]
    decision = next(e for e in events if e["kind"] == "decision")
    assert decision["actor"] == "web:bob"
    assert decision["scope"] == "session"
    assert decision["channel"] == "web"
    stored = await node.node.store.get_task(task_id)
    assert stored is not None and stored.submitted_by == "web:bob"


async def test_audit_events_have_the_contract_shape(client: httpx.AsyncClient,
                                                    echo: HttpEcho) -> None:
    """GET /audit lists hash-chained events in the contract's shape, filtered by task."""
    first = await waiting(client, echo)
    second = await waiting(client, echo)
    await client.post(f"/tasks/{first}/deny", json={"reason": "no"})
    page = (await client.get("/audit", params={"task": first})).json()
    assert set(page) == {"items", "next_cursor"}
    assert {e["task_id"] for e in page["items"]} == {first}
    for event in page["items"]:
        assert set(event) >= AUDIT_KEYS
    kinds = [e["kind"] for e in page["items"]]
    assert kinds == ["evaluation", "decision"]
    everything = (await client.get("/audit")).json()["items"]
    assert second in {e["task_id"] for e in everything}
    for before, after in itertools.pairwise(everything):
        assert after["prev_hash"] == before["hash"]


async def test_tasks_are_paginated_newest_first(client: httpx.AsyncClient) -> None:
    """GET /tasks pages by cursor, newest first, without repeats, and filters by state."""
    ids = [await submit(client, goal=f"g{i}", steps=[{"tool": "list_dir", "args": {"path": "."}}])
           for i in range(5)]
    for task_id in ids:
        await wait_state(client, task_id, "completed")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/tasks", params=params)).json()
        seen += [t["id"] for t in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3
    completed = (await client.get("/tasks", params={"state": "completed"})).json()["items"]
    assert len(completed) == 5
    assert (await client.get("/tasks", params={"state": "failed"})).json()["items"] == []


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 501}, {"state": "done"},
                                    {"cursor": "abc"}, {"cursor": "-1"}, {"limit": "x"}])
async def test_bad_list_parameters_are_422(client: httpx.AsyncClient,
                                           params: dict[str, Any]) -> None:
    """limit outside 1..500, an unknown state or a malformed cursor is 422 naming it."""
    response = await client.get("/tasks", params=params)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == next(iter(params))


async def test_pending_approvals_across_tasks(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """GET /approvals?status=pending lists each waiting request with its action and scopes."""
    first = await waiting(client, echo)
    second = await waiting(client, echo)
    page = (await client.get("/approvals", params={"status": "pending", "limit": 1})).json()
    assert [i["task_id"] for i in page["items"]] == [first]
    item = page["items"][0]
    assert item["status"] == "pending"
    assert item["action"]["tool"] == "send_webhook"
    assert item["allowed_scopes"] == ["once", "session", "always", "deny"]
    assert item["submitted_by"] == "web:admin"
    rest = (await client.get("/approvals", params={"cursor": page["next_cursor"]})).json()
    assert [i["task_id"] for i in rest["items"]] == [second]
    assert (await client.get("/approvals", params={"status": "done"})).status_code == 422


async def test_grants_are_listed_and_revoked(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A session approval leaves a grant; DELETE /grants/{id} revokes it and audits who did."""
    task_id = await waiting(client, echo)
    await client.post(f"/tasks/{task_id}/approve", json={"scope": "session"})
    await wait_state(client, task_id, "completed")
    grants = (await client.get("/grants")).json()["items"]
    assert len(grants) == 1
    grant = grants[0]
    assert grant["scope"] == "session" and grant["tool"] == "send_webhook" and grant["live"]
    revoked = await client.delete(f"/grants/{grant['id']}")
    assert revoked.status_code == 200
    assert revoked.json()["live"] is False and revoked.json()["revoked_at"]
    assert (await client.get("/grants")).json()["items"] == []
    assert len((await client.get("/grants", params={"include_revoked": True})).json()["items"]) == 1
    assert (await client.delete(f"/grants/{grant['id']}")).status_code == 200
    events = (await client.get("/audit")).json()["items"]
    revokes = [e for e in events if e["kind"] == "grant_revoked"]
    assert len(revokes) == 1 and revokes[0]["actor"] == "web:admin"
    assert (await client.delete("/grants/g-unknown")).status_code == 404


async def test_schedules_and_oncall_are_empty_without_providers(
        client: httpx.AsyncClient) -> None:
    """GET /schedules and /oncall answer empty results when nothing provides them."""
    assert (await client.get("/schedules")).json() == {"items": [], "next_cursor": None}
    oncall = await client.get("/oncall")
    assert oncall.status_code == 200
    assert oncall.json()["on_call"] == []


async def test_schedules_and_oncall_come_from_the_providers(tmp_path: Path) -> None:
    """The providers given in the context answer /schedules and /oncall."""
    async def schedules() -> list[dict[str, Any]]:
        return [{"name": "nightly", "next_run": "2026-12-01T02:00:00+00:00"}]

    asked: list[Any] = []

    async def oncall(at: Any) -> dict[str, Any]:
        asked.append(at)
        return {"on_call": ["slack:U1"], "rotations": [{"name": "ops"}]}

    async with running_node(tmp_path, schedules=schedules, oncall=oncall) as node, \
            node.client() as client:
        assert (await client.get("/schedules")).json()["items"][0]["name"] == "nightly"
        answer = await client.get("/oncall", params={"at": "2026-12-01T09:00:00Z"})
        assert answer.json()["on_call"] == ["slack:U1"]
        assert asked[0].hour == 9


async def test_metrics_are_prometheus_text(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """GET /metrics serves tasks by state, pending approvals, decisions, latency, actions."""
    task_id = await waiting(client, echo)
    await client.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
    await wait_state(client, task_id, "completed")
    await waiting(client, echo)
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'signoff_tasks{state="completed"} 1.0' in text
    assert 'signoff_tasks{state="waiting_approval"} 1.0' in text
    assert "signoff_pending_approvals 1.0" in text
    assert 'signoff_decisions_total{outcome="approved"} 1.0' in text
    assert "signoff_decision_latency_seconds_count 1.0" in text
    assert 'signoff_actions_total{outcome="ok",tool="send_webhook"} 1.0' in text
    assert "signoff_audit_events 3.0" in text
    head = (await client.get("/audit")).json()["items"][-1]["hash"]
    assert f'signoff_audit_head_info{{count="3",hash="{head}"}} 1.0' in text


async def test_openapi_is_served(client: httpx.AsyncClient) -> None:
    """GET /openapi.json describes the JSON routes (the console pages are left out)."""
    schema = (await client.get("/openapi.json")).json()
    paths = set(schema["paths"])
    assert {"/health", "/tasks", "/tasks/{task_id}", "/tasks/{task_id}/approve",
            "/tasks/{task_id}/deny", "/approvals", "/audit", "/metrics", "/grants"} <= paths
    assert "/console/decide" not in paths


async def test_a_browser_asking_for_a_task_gets_the_console_page(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """GET /tasks/{id} stays JSON for API clients; a browser is sent to the console page."""
    task_id = await waiting(client, echo)
    api = await client.get(f"/tasks/{task_id}", headers={"accept": "application/json"})
    assert api.headers["content-type"] == "application/json"
    anything = await client.get(f"/tasks/{task_id}", headers={"accept": "*/*"})
    assert anything.json()["id"] == task_id
    browser = await client.get(f"/tasks/{task_id}",
                               headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert browser.status_code == 303
    assert browser.headers["location"] == f"/console/tasks/{task_id}"


async def test_internal_errors_are_500_without_traces(tmp_path: Path) -> None:
    """An exception in a handler becomes 500 {"detail": "internal error"}, nothing more."""
    async def broken() -> list[dict[str, Any]]:
        raise RuntimeError("secret internals /etc/passwd")

    async with running_node(tmp_path, schedules=broken) as node, node.client() as client:
        response = await client.get("/schedules")
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error"}


async def test_handlers_never_wait_for_the_worker(tmp_path: Path, echo: HttpEcho) -> None:
    """With the worker stopped, submit, list and approve all still answer at once."""
    async with running_node(tmp_path) as node, node.client() as client:
        await stop_all([node.background[0]])  # the worker
        task_id = await submit(client, steps=webhook_steps(echo.url("/hook")))
        task = (await client.get(f"/tasks/{task_id}")).json()
        assert task["state"] == TaskState.QUEUED.value
        assert (await client.get("/tasks")).status_code == 200
        assert (await client.post(f"/tasks/{task_id}/approve")).status_code == 409


async def test_self_approval_can_be_forbidden(tmp_path: Path, echo: HttpEcho) -> None:
    """With forbid_self_approval, the submitter gets 403 and someone else can approve."""
    settings = make_settings(tmp_path, approvals={"forbid_self_approval": True})
    async with running_node(tmp_path, settings=settings) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob:
        task_id = await waiting(admin, echo)
        refused = await admin.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
        assert refused.status_code == 403
        assert "someone else" in refused.json()["detail"]
        assert (await bob.post(f"/tasks/{task_id}/approve", json={})).status_code == 200
        done = await wait_state(admin, task_id, "completed")
        assert done["actions"][0]["decided_by"] == "web:bob"
