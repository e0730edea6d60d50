"""POST /tasks and POST /v1/approvals answer alike whichever layer answers them.

A well-formed request is answered by `signoff.api.intake` before FastAPI's routing; a
refusal found before the handler runs (a body that fails validation, a bad header) is
left to the FastAPI route; a refusal of the handler itself (an unknown tool) comes from
the intake. A caller must not be able to tell: same status, same JSON shape, same words.
"""

from __future__ import annotations

import httpx

from tests.api.helpers import BOB_KEY, Running

STEP = {"tool": "list_dir", "args": {"path": "."}}


async def test_a_submitted_task_is_202_with_its_id_and_location(
        client: httpx.AsyncClient) -> None:
    answer = await client.post("/tasks", json={"goal": "look", "steps": [STEP]})
    assert answer.status_code == 202, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert list(answer.json()) == ["id"]
    assert answer.headers["location"] == f"/tasks/{answer.json()['id']}"
    assert (await client.get(answer.headers["location"])).json()["goal"] == "look"


async def test_refusals_before_and_inside_the_handler_name_the_field(
        client: httpx.AsyncClient) -> None:
    # Refused by validation (the FastAPI route answers) ...
    empty = await client.post("/tasks", json={"goal": "", "steps": [STEP]})
    # ... and by the handler (the intake answers): the same shape.
    unknown = await client.post("/tasks", json={"goal": "g", "steps": [{"tool": "nope"}]})
    for answer, field in ((empty, "goal"), (unknown, "steps[0].tool")):
        assert answer.status_code == 422, answer.text
        assert answer.headers["content-type"] == "application/json"
        body = answer.json()
        assert set(body) == {"detail", "errors"}
        assert body["detail"].startswith(f"{field}: ")
        assert body["errors"][0]["field"] == field
    assert "unknown tool 'nope'" in unknown.json()["detail"]


async def test_a_named_key_submits_and_the_task_is_its_own(node: Running) -> None:
    async with node.client(BOB_KEY) as agent:
        answer = await agent.post("/tasks", json={"goal": "mine", "steps": [STEP]})
        assert answer.status_code == 202, answer.text
    task = await node.node.store.get_task(answer.json()["id"])
    assert task is not None and task.submitted_by == "web:bob"


async def test_an_outside_request_with_a_bad_idempotency_key_is_422_naming_it(
        client: httpx.AsyncClient) -> None:
    ask = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "s",
                                          "body": "b"},
           "requester": "hermes:bob", "policy_id": "s-1"}
    bad = await client.post("/v1/approvals", json=ask, headers={"Idempotency-Key": "a b"})
    assert bad.status_code == 422, bad.text
    assert "Idempotency-Key" in bad.json()["detail"] or any(
        "idempotency" in e["field"].lower() for e in bad.json()["errors"])
    good = await client.post("/v1/approvals", json=ask, headers={"Idempotency-Key": "k-1"})
    again = await client.post("/v1/approvals", json=ask, headers={"Idempotency-Key": "k-1"})
    assert good.status_code == again.status_code == 202, (good.text, again.text)
    assert again.json() == good.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in good.headers
    assert good.headers["location"] == f"/v1/approvals/{good.json()['id']}"
