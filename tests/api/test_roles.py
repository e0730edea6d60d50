"""Roles of API keys: a requester key asks and reads its own, never decides; an approval
by task id names the request the person saw."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.api.access import REQUESTER_ROUTES
from signoff.config.settings import Settings
from tests.api.helpers import KEY, Running, running_node, state_beside, wait_state, webhook_steps
from tests.api.test_api_security import _flatten
from tests.fakes.http_echo import HttpEcho

AGENT_KEY = "agent-key-0123456789abcdef"
OTHER_KEY = "other-agent-key-0123456789"
ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1"}


@pytest.fixture
async def roles_node(tmp_path: Path) -> AsyncIterator[Running]:
    """A node with the admin key and two requester keys, ``agent`` and ``other``."""
    settings = Settings.model_validate({
        "daemon": {"work_dir": str(tmp_path), "node_id": "test-node",
                   "state_dir": str(state_beside(tmp_path))},
        "api": {"key": KEY, "keys": [
            {"name": "agent", "key": AGENT_KEY, "role": "requester"},
            {"name": "other", "key": OTHER_KEY, "role": "requester"}]}})
    async with running_node(tmp_path, settings=settings) as running:
        yield running


async def waiting(client: httpx.AsyncClient, echo: HttpEcho, steps: int = 1) -> dict[str, Any]:
    response = await client.post("/tasks", json={
        "goal": "g", "steps": webhook_steps(echo.url("/hook")) * steps})
    assert response.status_code == 202, response.text
    return await wait_state(client, response.json()["id"], "waiting_approval")


async def test_a_requester_key_cannot_decide(roles_node: Running, echo: HttpEcho) -> None:
    """Every decide route answers 403 to a requester key, also for its own task, and
    nothing is decided."""
    async with roles_node.client(AGENT_KEY) as agent, roles_node.client() as admin:
        task = await waiting(agent, echo)
        approval_id = task["approval"]["id"]
        for path, body in ((f"/tasks/{task['id']}/approve", {}),
                           (f"/tasks/{task['id']}/deny", {}),
                           (f"/approvals/{approval_id}/approve", {"scope": "once"}),
                           (f"/approvals/{approval_id}/deny", {}),
                           (f"/approvals/{approval_id}/undo", None),
                           ("/approvals/batch", {"ids": [approval_id], "decision": "once"})):
            refused = await agent.post(path, json=body)
            assert refused.status_code == 403, (path, refused.text)
            assert "requester" in refused.json()["detail"]
        for path in ("/audit", "/grants", "/", "/metrics"):
            assert (await agent.get(path)).status_code == 403, path
        still = (await admin.get(f"/tasks/{task['id']}")).json()
        assert still["state"] == "waiting_approval"
        assert still["approval"]["status"] == "pending"
        assert echo.requests == []


async def test_a_requester_reads_only_what_it_asked(roles_node: Running,
                                                    echo: HttpEcho) -> None:
    """Another caller's task or request is 404 to a requester key; lists show its own."""
    async with roles_node.client(AGENT_KEY) as agent, roles_node.client(OTHER_KEY) as other, \
            roles_node.client() as admin:
        mine = await waiting(agent, echo)
        theirs = await waiting(admin, echo)
        assert (await agent.get(f"/tasks/{mine['id']}")).status_code == 200
        assert (await agent.get(f"/tasks/{theirs['id']}")).status_code == 404
        assert (await other.get(f"/tasks/{mine['id']}")).status_code == 404
        assert (await agent.get(f"/tasks/{theirs['id']}/transcript")).status_code == 404
        listed = (await agent.get("/tasks")).json()["items"]
        assert [t["id"] for t in listed] == [mine["id"]]
        pending = (await agent.get("/approvals")).json()["items"]
        assert [p["id"] for p in pending] == [mine["approval"]["id"]]
        assert len((await admin.get("/approvals")).json()["items"]) == 2
        asked = await agent.post("/v1/approvals", json=ASK)
        assert asked.status_code == 202, asked.text
        request_id = asked.json()["id"]
        assert (await agent.get(f"/v1/approvals/{request_id}")).status_code == 200
        assert (await other.get(f"/v1/approvals/{request_id}")).status_code == 404
        assert (await other.post(f"/v1/approvals/{request_id}/outcome",
                                 json={"ok": True})).status_code == 404
        assert (await agent.get(f"/v1/approvals/{theirs['approval']['id']}")).status_code == 404


async def test_a_requester_key_cannot_sign_in_to_the_console(roles_node: Running) -> None:
    """The console is for deciders: a requester key gets no session."""
    async with roles_node.client(None) as browser:
        answer = await browser.post("/login", data={"key": AGENT_KEY, "next": "/"})
        assert answer.status_code == 403
        assert "signoff_session" not in browser.cookies
        by_query = await browser.get("/", params={"key": AGENT_KEY})
        assert by_query.status_code == 403
        assert "signoff_session" not in browser.cookies


async def test_an_approver_key_decides_and_reads_everything(node: Running,
                                                            echo: HttpEcho) -> None:
    """A [[api.keys]] entry without role (bob) reads others' tasks and decides, as in 0.2."""
    async with node.client() as admin, node.client("bob-key-0123456789abcdef") as bob:
        task = await waiting(admin, echo)
        assert (await bob.get(f"/tasks/{task['id']}")).status_code == 200
        approved = await bob.post(f"/tasks/{task['id']}/approve", json={})
        assert approved.status_code == 200, approved.text


async def test_approving_by_task_id_names_the_request_seen(client: httpx.AsyncClient,
                                                           echo: HttpEcho) -> None:
    """An approval_id that is not the one the task waits on now is 409; nothing is decided."""
    task = await waiting(client, echo, steps=2)
    first = task["approval"]["id"]
    answer = await client.post(f"/tasks/{task['id']}/approve", json={"approval_id": first})
    assert answer.status_code == 200, answer.text
    second = (await wait_state(client, task["id"], "waiting_approval"))["approval"]
    while second["id"] == first:  # the worker runs the first step, then asks again
        second = (await wait_state(client, task["id"], "waiting_approval"))["approval"]
    for verb in ("approve", "deny"):
        stale = await client.post(f"/tasks/{task['id']}/{verb}", json={"approval_id": first})
        assert stale.status_code == 409, stale.text
        assert second["id"] in stale.json()["detail"]
    now = (await client.get(f"/tasks/{task['id']}")).json()
    assert now["state"] == "waiting_approval"
    assert now["approval"] == second and now["approval"]["status"] == "pending"
    assert len(echo.requests) == 1
    mismatch = await client.post(f"/approvals/{second['id']}/approve",
                                 json={"approval_id": first})
    assert mismatch.status_code == 409
    done = await client.post(f"/tasks/{task['id']}/approve", json={"approval_id": second["id"]})
    assert done.status_code == 200


async def test_every_route_not_listed_for_requesters_refuses_them(roles_node: Running) -> None:
    """A requester key gets 403 from every route but its own few (a route added later is
    closed to it until listed in signoff.api.access), and every listed route exists."""
    seen = set()
    async with roles_node.client(AGENT_KEY) as agent:
        for route in _flatten(list(roles_node.app.routes)):
            template = str(getattr(route, "path", ""))
            for method in sorted(getattr(route, "methods", None) or ()):
                seen.add((method, template))
                if (method, template) in REQUESTER_ROUTES or method == "HEAD" \
                        or template in ("/health", "/login", "/static/{name}",
                                        "/openapi.json"):  # the API's description
                    continue
                path = re.sub(r"\{[^}]+\}", "x", template)
                answer = await agent.request(method, path,
                                             json={} if method != "GET" else None)
                assert answer.status_code == 403, (method, template, answer.status_code)
    future = {("DELETE", "/v1/approvals/{approval_id}")}  # withdrawing: not built yet
    assert REQUESTER_ROUTES - future <= seen


async def test_only_the_asker_reports_what_it_did(node: Running) -> None:
    """An approver key cannot record the outcome of a request another key asked: the
    caller's one report would be refused as "already reported" and the audit would say
    the action failed (or ran) on a stranger's word. The asker still reports it."""
    async with node.client() as admin, node.client("bob-key-0123456789abcdef") as bob:
        asked = await admin.post("/v1/approvals", json=ASK)
        assert asked.status_code == 202, asked.text
        request_id = asked.json()["id"]
        approved = await bob.post(f"/approvals/{request_id}/approve", json={"scope": "once"})
        assert approved.status_code == 200, approved.text
        forged = await bob.post(f"/v1/approvals/{request_id}/outcome",
                                json={"ok": False, "detail": "it failed"})
        assert forged.status_code == 403, forged.text
        assert (await bob.get(f"/v1/approvals/{request_id}")).json()["outcome"] is None
        reported = await admin.post(f"/v1/approvals/{request_id}/outcome", json={"ok": True})
        assert reported.status_code == 200, reported.text
        assert reported.json()["outcome"]["reported_by"] == "web:admin"
