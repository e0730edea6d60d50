"""Coalescing over the API: identical pending requests share one card, one answer decides
them all (each audited, each task's own grant), a later one joins, and it can be off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from signoff.runtime.models import Scope
from tests.api.helpers import (
    Running,
    eventually,
    make_settings,
    running_node,
    wait_state,
    webhook_steps,
)
from tests.fakes.http_echo import HttpEcho

OUTSIDE = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi",
                                          "body": "x"}, "requester": "hermes:alice"}


async def submit_tasks(client: httpx.AsyncClient, echo: HttpEcho, count: int) -> list[str]:
    ids = []
    for n in range(count):
        answer = await client.post("/tasks", json={"goal": f"tell the hook {n}",
                                                   "steps": webhook_steps(echo.url("/hook"))})
        assert answer.status_code == 202, answer.text
        ids.append(str(answer.json()["id"]))
    for task_id in ids:
        await wait_state(client, task_id, "waiting_approval")
    return ids


async def approvals_of(client: httpx.AsyncClient, task_ids: list[str]) -> list[str]:
    return [(await client.get(f"/tasks/{t}")).json()["approval"]["id"] for t in task_ids]


def open_cards(node: Running) -> list[Any]:
    return [c for c in node.web.cards.values() if c.open]


async def one_card_saying(node: Running, words: str) -> Any:
    async def shown() -> bool:
        cards = open_cards(node)
        return len(cards) == 1 and words in cards[0].title
    await eventually(shown, what=f"one open card saying {words!r}: {open_cards(node)}")
    return open_cards(node)[0]


async def decisions(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    events = (await client.get("/audit", params={"limit": 500})).json()["items"]
    return [e for e in events if e["kind"] == "decision"]


async def test_three_identical_task_requests_share_one_card_and_one_answer(
        node: Running, client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Three tasks asking the same webhook get one card ("3 identical requests"); one
    session answer on it runs all three, audits each, and gives each task its own grant."""
    tasks = await submit_tasks(client, echo, 3)
    approvals = await approvals_of(client, tasks)
    card = await one_card_saying(node, "3 identical requests")
    assert card.approval_id == approvals[0]
    answer = await client.post(f"/approvals/{card.approval_id}/approve",
                               json={"scope": "session"})
    assert answer.status_code == 200, answer.text
    for task_id in tasks:
        await wait_state(client, task_id, "completed")
    assert len([r for r in echo.requests if r.path == "/hook"]) == 3
    decided = await decisions(client)
    assert sorted(e["approval_id"] for e in decided) == sorted(approvals)
    assert {(e["actor"], e["scope"], e["decision"]) for e in decided} == {
        ("web:admin", "session", "approve")}
    assert sorted(e["task_id"] for e in decided) == sorted(tasks)
    grants = await node.node.store.list_grants()
    assert sorted(g.policy_id for g in grants if g.scope is Scope.SESSION) == sorted(tasks)
    await eventually(lambda: _async(not open_cards(node) and len(node.web.cards) == 1),
                     what="the one card decided")
    assert "Approved for this session by web:admin" in (node.web.cards[card.approval_id]
                                                        .outcome or "")


async def _async(value: bool) -> bool:
    return value


async def test_a_later_identical_request_joins_the_pending_card(
        node: Running, client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """An identical request made while the card is pending adds to its count, no new card."""
    first = await submit_tasks(client, echo, 1)
    card = await one_card_saying(node, "webhook")
    assert "identical" not in card.title
    second = await submit_tasks(client, echo, 1)
    card = await one_card_saying(node, "2 identical requests")
    assert card.approval_id == (await approvals_of(client, first))[0]
    denied = await client.post(f"/approvals/{card.approval_id}/deny", json={"reason": "no"})
    assert denied.status_code == 200
    for task_id in first + second:
        task = await wait_state(client, task_id, "failed")
        assert task["result"]["reason"] == "user denied: no"


async def test_outside_requests_of_different_policies_coalesce_and_deny_together(
        node: Running, client: httpx.AsyncClient) -> None:
    """POST /v1/approvals: the same action under three policy ids is one card; one deny
    denies every request, each audited with the decider."""
    ids = []
    for policy in ("s-1", "s-2", "s-3"):
        answer = await client.post("/v1/approvals", json={**OUTSIDE, "policy_id": policy})
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["id"])
    card = await one_card_saying(node, "3 identical requests")
    assert card.approval_id == ids[0]
    pending = (await client.get("/approvals")).json()["items"]
    assert {p["id"]: p["coalesced_into"] for p in pending} == {
        ids[0]: None, ids[1]: ids[0], ids[2]: ids[0]}
    assert (await client.post(f"/approvals/{ids[0]}/deny")).status_code == 200
    for approval_id in ids:
        status = (await client.get(f"/v1/approvals/{approval_id}")).json()
        assert status["status"] == "denied" and status["decided_by"] == "web:admin"
    decided = await decisions(client)
    assert sorted(e["approval_id"] for e in decided) == sorted(ids)


async def test_always_on_a_shared_card_grants_each_policy_id(
        node: Running, client: httpx.AsyncClient,
        agent: httpx.AsyncClient) -> None:
    """An always answer on a shared card remembers the action under each request's own
    policy_id: the next identical request of each policy (by the key that asked) is
    allowed at once."""
    ids = []
    for policy in ("s-1", "s-2"):
        answer = await agent.post("/v1/approvals", json={**OUTSIDE, "policy_id": policy})
        ids.append(answer.json()["id"])
    answer = await client.post(f"/approvals/{ids[0]}/approve", json={"scope": "always"})
    assert answer.status_code == 200, answer.text
    for policy in ("s-1", "s-2"):
        again = await agent.post("/v1/approvals", json={**OUTSIDE, "policy_id": policy})
        assert again.status_code == 200 and again.json()["status"] == "approved"
    other = await agent.post("/v1/approvals", json={**OUTSIDE, "policy_id": "s-9"})
    assert other.status_code == 202


async def test_a_member_decided_by_its_own_id_leaves_the_group(
        node: Running, client: httpx.AsyncClient,
        agent: httpx.AsyncClient) -> None:
    """Deciding a member directly decides only it; the shared card counts one less."""
    ids = []
    for policy in ("s-1", "s-2", "s-3"):
        answer = await agent.post("/v1/approvals", json={**OUTSIDE, "policy_id": policy})
        ids.append(answer.json()["id"])
    await one_card_saying(node, "3 identical requests")
    assert (await client.post(f"/approvals/{ids[2]}/deny")).status_code == 200
    await one_card_saying(node, "2 identical requests")
    assert (await client.post(f"/approvals/{ids[0]}/approve")).status_code == 200
    states = [(await client.get(f"/v1/approvals/{i}")).json()["status"] for i in ids]
    assert states == ["approved", "approved", "denied"]


async def test_coalescing_off_gives_each_request_its_card(tmp_path: Path) -> None:
    """approvals.coalesce = false: identical requests each get their own card."""
    settings = make_settings(tmp_path, approvals={"coalesce": False})
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        for policy in ("s-1", "s-2"):
            answer = await client.post("/v1/approvals", json={**OUTSIDE, "policy_id": policy})
            assert answer.status_code == 202

        async def two() -> bool:
            return len(open_cards(node)) == 2
        await eventually(two, what="two cards")
        assert all("identical" not in c.title for c in open_cards(node))


async def test_a_time_boxed_answer_on_a_shared_card_boxes_every_grant(
        node: Running, client: httpx.AsyncClient,
        agent: httpx.AsyncClient) -> None:
    """Always "for 30m" on a shared card: each request's own grant lapses 30 minutes after
    the answer, not never (the members take the card's time box)."""
    ids = []
    for policy in ("s-1", "s-2"):
        answer = await agent.post("/v1/approvals", json={**OUTSIDE, "policy_id": policy})
        ids.append(answer.json()["id"])
    await one_card_saying(node, "2 identical requests")
    answer = await client.post(f"/approvals/{ids[0]}/approve",
                               json={"scope": "always", "for": "30m"})
    assert answer.status_code == 200, answer.text
    grants = [g for g in await node.node.store.list_grants() if g.scope is Scope.ALWAYS]
    assert sorted(g.policy_id for g in grants) == ["s-1", "s-2"]
    lapses = [round((g.expires_at - g.created_at).total_seconds()) if g.expires_at else None
              for g in grants]
    assert lapses == [1800, 1800]


async def test_a_shared_card_cannot_be_edited(
        node: Running, client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Edited args on a card two tasks share are refused (each asked its own content) and
    decide nothing; the card stays open for a plain answer."""
    tasks = await submit_tasks(client, echo, 2)
    card = await one_card_saying(node, "2 identical requests")
    answer = await client.post(f"/approvals/{card.approval_id}/approve", json={
        "scope": "once", "args": {"url": echo.url("/other"), "payload": {"n": 2}}})
    assert answer.status_code == 422 and "shared by identical requests" in answer.text
    assert [(await client.get(f"/tasks/{t}")).json()["state"] for t in tasks] == [
        "waiting_approval", "waiting_approval"]


async def test_two_payloads_to_one_url_get_two_cards_and_once_sends_only_the_shown_one(
        node: Running, client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Two tasks posting different payloads to one webhook get a card each; Once on the
    first card sends the first payload only, and the second task keeps waiting."""
    tasks = []
    for n, payload in enumerate(({"say": "ship it"}, {"say": "wipe prod"})):
        answer = await client.post("/tasks", json={
            "goal": f"hook {n}", "steps": webhook_steps(echo.url("/hook"), payload)})
        tasks.append(str(answer.json()["id"]))
    for task_id in tasks:
        await wait_state(client, task_id, "waiting_approval")
    approvals = await approvals_of(client, tasks)

    async def two_cards() -> bool:
        return sorted(c.approval_id for c in open_cards(node)) == sorted(approvals)
    await eventually(two_cards, what=f"a card per request: {open_cards(node)}")
    assert all("identical" not in c.title for c in open_cards(node))
    first = node.web.cards[approvals[0]]
    assert any("ship it" in value for _, value in first.details)
    answer = await client.post(f"/approvals/{approvals[0]}/approve", json={"scope": "once"})
    assert answer.status_code == 200, answer.text
    await wait_state(client, tasks[0], "completed")
    sent = [r.json() for r in echo.requests if r.path == "/hook"]
    assert sent == [{"say": "ship it"}]
    assert (await client.get(f"/tasks/{tasks[1]}")).json()["state"] == "waiting_approval"


async def test_outside_requests_that_differ_only_in_content_never_share_a_card(
        node: Running, client: httpx.AsyncClient, agent: httpx.AsyncClient) -> None:
    """Two e-mails to one recipient with different bodies are two requests with a card
    each; denying one leaves the other pending."""
    ids = []
    for body in ("lunch at noon?", "here are the payroll files"):
        answer = await agent.post("/v1/approvals", json={
            **OUTSIDE, "args": {**OUTSIDE["args"], "body": body}, "policy_id": "s-1"})
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["id"])
    pending = (await client.get("/approvals")).json()["items"]
    assert {p["id"]: p["coalesced_into"] for p in pending} == {ids[0]: None, ids[1]: None}
    assert (await client.post(f"/approvals/{ids[0]}/deny")).status_code == 200
    assert (await client.get(f"/v1/approvals/{ids[1]}")).json()["status"] == "pending"


async def test_requests_whose_server_describes_the_tool_otherwise_never_share_a_card(
        node: Running, client: httpx.AsyncClient, agent: httpx.AsyncClient) -> None:
    """The card quotes what an outside agent's tool is said to do: a request that came with
    another description was never shown on the first one's card, so it gets its own, and
    approving the first sends only the first."""
    ids = []
    for said in ("Sends a short note to a colleague.", "Forwards the mailbox to anyone."):
        answer = await agent.post("/v1/approvals", json={
            "tool": "mailbox_share", "args": {"to": "john@example.com"},
            "requester": "hermes:alice", "policy_id": "s-1", "description": said})
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["id"])
    pending = (await client.get("/approvals")).json()["items"]
    assert {p["id"]: p["coalesced_into"] for p in pending} == {ids[0]: None, ids[1]: None}
    assert (await client.post(f"/approvals/{ids[0]}/approve")).status_code == 200
    assert (await client.get(f"/v1/approvals/{ids[0]}")).json()["status"] == "approved"
    assert (await client.get(f"/v1/approvals/{ids[1]}")).json()["status"] == "pending"
