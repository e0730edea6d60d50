"""URLs in API answers: user info and query values masked everywhere but GET /audit, while
the action, its fingerprint and its grant keep the real URL."""

from __future__ import annotations

from typing import Any

import httpx

from signoff.runtime.text import MASK
from tests.api.helpers import Running, wait_state
from tests.fakes.http_echo import HttpEcho

SECRET = "s3cr3t-token"


def hook(echo: HttpEcho) -> str:
    """The echo's webhook with a secret in its user info and in its query."""
    return echo.url(f"/hook?token={SECRET}&v=2").replace("http://", f"http://bob:{SECRET}@")


def masked_hook(echo: HttpEcho) -> str:
    return echo.url(f"/hook?token={MASK}&v={MASK}").replace("http://", f"http://{MASK}@")


def two_calls(url: str) -> list[dict[str, Any]]:
    return [{"tool": "send_webhook", "args": {"url": url, "payload": {"n": n}}}
            for n in (1, 2)]


async def test_task_answers_mask_and_audit_keeps_the_real_url(
        node: Running, client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """GET /tasks/{id} and GET /approvals mask the URL; GET /audit shows the real one; the
    same call approved for the session runs again unasked, with the real URL both times."""
    real, shown = hook(echo), masked_hook(echo)
    submitted = await client.post("/tasks", json={"goal": f"ping {real}",
                                                  "steps": two_calls(real)})
    task_id = submitted.json()["id"]
    task = await wait_state(client, task_id, "waiting_approval")
    assert SECRET not in str(task)
    assert task["goal"] == f"ping {shown}"
    assert task["pending_action"]["args"]["url"] == shown
    assert task["pending_action"]["targets"] == [shown]
    pending = (await client.get("/approvals")).json()["items"]
    assert pending[0]["action"]["args"]["url"] == shown and SECRET not in str(pending)

    audit = (await client.get("/audit")).json()["items"]
    asked = [e for e in audit if e["task_id"] == task_id and e["decision"] == "ASK_USER"]
    assert asked and asked[0]["targets"] == [real]

    assert (await client.post(f"/tasks/{task_id}/approve",
                              json={"scope": "session"})).status_code == 200
    done = await wait_state(client, task_id, "completed")
    assert [r["args"]["url"] for r in done["actions"]] == [shown, shown]
    assert len([r for r in echo.requests if r.path == "/hook"]) == 2
    stored = await node.node.store.get_task(task_id)
    assert stored is not None and stored.steps is not None
    assert {step.args["url"] for step in stored.steps} == {real}

    grants = (await client.get("/grants")).json()["items"]
    assert len(grants) == 1 and grants[0]["targets"] == [shown]
    # The grant covers the real URL: its fingerprint is the one the audit recorded.
    assert grants[0]["fingerprint"] == asked[0]["fingerprint"]
    audit = (await client.get("/audit")).json()["items"]
    auto = [e for e in audit if e["task_id"] == task_id and e["targets"] == [real]
            and e["decision"] not in ("ASK_USER", None)]
    assert auto, "the second call was decided by the grant, with the real URL audited"


async def test_outside_request_answers_mask(client: httpx.AsyncClient) -> None:
    """POST /v1/approvals with a URL: GET /approvals and GET /v1/approvals/{id} mask its
    user info and query values (a deny reason too); GET /audit does not."""
    url = f"https://ci:{SECRET}@example.com/deploy?sig={SECRET}"
    created = await client.post("/v1/approvals", json={
        "tool": "deploy", "args": {"url": url}, "targets": [url], "requester": "hermes:a",
        "policy_id": "s-1", "why": f"because {url}", "goal": f"deploy via {url}"})
    assert created.status_code == 202, created.text
    approval_id = created.json()["id"]
    shown = f"https://{MASK}@example.com/deploy?sig={MASK}"
    item = (await client.get("/approvals")).json()["items"][0]
    assert item["action"]["args"] == {"url": shown} and item["action"]["targets"] == [shown]
    assert item["why"] == f"because {shown}" and item["goal"] == f"deploy via {shown}"
    denied = await client.post(f"/approvals/{approval_id}/deny",
                               json={"reason": f"not {url}"})
    assert denied.status_code == 200 and denied.json()["reason"] == f"not {shown}"
    status = (await client.get(f"/v1/approvals/{approval_id}")).json()
    assert status["reason"] == f"not {shown}" and SECRET not in str(status)
    audit = (await client.get("/audit")).json()["items"]
    mine = [e for e in audit if e["approval_id"] == approval_id]
    assert any(e["targets"] == [url] for e in mine)
    assert any(e["reason"] == f"not {url}" for e in mine)


async def test_error_answers_mask_urls_too(client: httpx.AsyncClient) -> None:
    """A refusal that quotes the action's URL quotes it masked."""
    url = f"ftp://ci:{SECRET}@example.com/file?sig={SECRET}"
    response = await client.post("/tasks", json={"goal": "x", "steps": [
        {"tool": "send_webhook", "args": {"url": url, "payload": {}}}]})
    assert response.status_code == 422, response.text
    assert "example.com" in response.text and SECRET not in response.text
