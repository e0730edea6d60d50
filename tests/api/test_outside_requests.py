"""Requests from agents that are not ours: POST /v1/approvals and deciding any request."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx

from signoff.api.approvals import MAX_WAIT, wait_seconds
from signoff.runtime import ids
from signoff.runtime.clock import FakeClock
from signoff.runtime.store.port import Change
from tests.api.helpers import (
    BASE,
    BOB_KEY,
    Running,
    make_settings,
    running_node,
    wait_state,
)

ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1", "why": "tell John it shipped"}


def ask(**changes: Any) -> dict[str, Any]:
    return {**ASK, **changes}


async def pending(client: httpx.AsyncClient, **changes: Any) -> str:
    response = await client.post("/v1/approvals", json=ask(**changes))
    assert response.status_code == 202, response.text
    body = response.json()
    assert set(body) == {"id", "status", "expires_at"} and body["status"] == "pending"
    return str(body["id"])


async def audit_of(client: httpx.AsyncClient, approval_id: str) -> list[dict[str, Any]]:
    events = (await client.get("/audit", params={"limit": 500})).json()["items"]
    return [e for e in events if e["approval_id"] == approval_id]


async def test_pending_then_approved_by_a_person(client: httpx.AsyncClient,
                                                 agent: httpx.AsyncClient) -> None:
    """A SEND request waits (202, a card in the console), is approved, and reads approved."""
    approval_id = await pending(agent)
    status = (await client.get(f"/v1/approvals/{approval_id}")).json()
    assert status["status"] == "pending" and status["decided_by"] is None
    answer = await client.post(f"/approvals/{approval_id}/approve", json={"scope": "once"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "approved"
    status = (await client.get(f"/v1/approvals/{approval_id}")).json()
    assert status["status"] == "approved" and status["scope"] == "once"
    assert status["decided_by"] == "web:admin" and status["decided_at"]
    assert status["task_id"] is None and status["policy_id"] == "s-1"
    kinds = [(e["kind"], e["decision"]) for e in await audit_of(client, approval_id)]
    assert kinds == [("evaluation", "ASK_USER"), ("decision", "approve")]


async def test_the_card_shows_who_asks_and_why(node: Running, client: httpx.AsyncClient) -> None:
    """The console card of an outside request names the requester, its policy and why."""
    approval_id = await pending(client)

    for _ in range(500):
        if node.web.card(approval_id) is not None:
            break
        await asyncio.sleep(0.01)
    card = node.web.card(approval_id)
    assert card is not None and card.task_id is None
    assert card.requester == "hermes:alice@laptop" and card.why == "tell John it shipped"
    page = (await client.get("/", headers={"Accept": "text/html"})).text
    assert "hermes:alice@laptop" in page and "tell John it shipped" in page and "s-1" in page


async def test_denied_request_reads_denied_with_the_reason(client: httpx.AsyncClient) -> None:
    """POST /approvals/{id}/deny denies an outside request; the reason is kept."""
    approval_id = await pending(client)
    answer = await client.post(f"/approvals/{approval_id}/deny", json={"reason": "not now"})
    assert answer.status_code == 200
    status = (await client.get(f"/v1/approvals/{approval_id}")).json()
    assert status["status"] == "denied" and status["reason"] == "not now"
    again = await client.post(f"/approvals/{approval_id}/approve")
    assert again.status_code == 409 and again.json()["state"] == "denied"


async def test_read_is_allowed_at_once_without_a_card(node: Running,
                                                       client: httpx.AsyncClient) -> None:
    """A READ request is settled by the policy: 200 ALLOW, no card, audited."""
    response = await client.post("/v1/approvals", json=ask(tool="read_file",
                                                          args={"path": "notes.txt"}))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "approved" and body["decision"] == "ALLOW"
    assert set(body) == {"id", "status", "decision", "reason"}
    await node.node.flow.dispatcher.run_once()
    assert node.web.card(body["id"]) is None
    listed = (await client.get("/approvals")).json()["items"]
    assert body["id"] not in [i["id"] for i in listed]
    [event] = await audit_of(client, body["id"])
    assert (event["kind"], event["decision"], event["actor"]) == ("evaluation", "ALLOW",
                                                                   "auto:policy")


async def test_a_request_can_raise_a_registry_risk_but_never_lower_it(
        client: httpx.AsyncClient) -> None:
    """send_email sent as READ is still SEND (202); read_file sent as SEND asks a person."""
    lowered = await client.post("/v1/approvals", json=ask(risk="READ"))
    assert lowered.status_code == 202
    raised = await client.post("/v1/approvals", json=ask(tool="read_file", risk="SEND",
                                                        args={"path": "a.txt"}))
    assert raised.status_code == 202
    items = {i["id"]: i for i in (await client.get("/approvals")).json()["items"]}
    assert items[raised.json()["id"]]["action"]["risk"] == "SEND"
    assert items[lowered.json()["id"]]["action"]["capability"] == "email.send"


async def test_an_argument_a_registry_tool_does_not_take_is_refused_not_dropped(
        client: httpx.AsyncClient) -> None:
    """The caller runs its own call: send_email with an extra ``bcc`` would have been
    approved (a card without it) and sent with it. 422 naming it; a null one is absent."""
    extra = await client.post("/v1/approvals", json=ask(
        args={**ASK["args"], "bcc": "eve@example.com"}))
    assert extra.status_code == 422, extra.text
    assert "'bcc'" in extra.json()["detail"]
    assert (await client.get("/approvals", params={"status": "pending"})).json()["items"] == []
    nulled = await client.post("/v1/approvals", json=ask(args={**ASK["args"], "cc": None}))
    assert nulled.status_code == 202, nulled.text


async def test_an_unknown_tool_is_destructive_unless_the_request_says(
        client: httpx.AsyncClient) -> None:
    """A tool signoff does not know takes the request's labels; risk defaults to DESTRUCTIVE."""
    plain = await client.post("/v1/approvals", json=ask(tool="hermes.cronjob", args={"x": 1}))
    assert plain.status_code == 202
    read = await client.post("/v1/approvals", json=ask(tool="hermes.web_search",
                                                      args={"query": "q"}, risk="READ"))
    assert read.status_code == 200 and read.json()["decision"] == "ALLOW"
    items = {i["id"]: i for i in (await client.get("/approvals")).json()["items"]}
    action = items[plain.json()["id"]]["action"]
    assert action["risk"] == "DESTRUCTIVE" and action["capability"] == "hermes.cronjob"


async def test_prohibited_requests_are_blocked(tmp_path: Path) -> None:
    """policy.prohibit blocks an outside request at once (200 BLOCK); it cannot be approved."""
    settings = make_settings(tmp_path, policy={"prohibit": ["email.send"]})
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        response = await client.post("/v1/approvals", json=ask())
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "denied" and body["decision"] == "BLOCK"
        assert "prohibited by policy (email.send)" in body["reason"]
        approve = await client.post(f"/approvals/{body['id']}/approve")
        assert approve.status_code == 409


async def test_idempotency_key_returns_the_same_request(node: Running,
                                                       client: httpx.AsyncClient) -> None:
    """The same Idempotency-Key returns the same request; another key holder gets its own."""
    headers = {"Idempotency-Key": "call-42"}
    first = await client.post("/v1/approvals", json=ask(), headers=headers)
    second = await client.post("/v1/approvals", json=ask(), headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] == second.json()["id"]
    assert second.headers["Idempotent-Replayed"] == "true"
    async with node.client(key=BOB_KEY) as bob:
        other = await bob.post("/v1/approvals", json=ask(), headers=headers)
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]
    async with node.client(key=BOB_KEY) as bob:
        assert (await bob.post(f"/approvals/{first.json()['id']}/approve")).status_code == 200
    replay = await client.post("/v1/approvals", json=ask(), headers=headers)
    assert replay.status_code == 200 and replay.json()["status"] == "approved"
    assert replay.json()["id"] == first.json()["id"]


async def test_a_used_key_never_answers_for_another_request(
        client: httpx.AsyncClient) -> None:
    """A key first used for an auto-approved READ gets 422 for a send_email (or any other
    tool, args, risk, targets, content or policy_id), never the READ's "approved"."""
    headers = {"Idempotency-Key": "k-bound"}
    read = {"tool": "read_file", "args": {"path": "notes.txt"}, "requester": "agent",
            "policy_id": "s-1"}
    first = await client.post("/v1/approvals", json=read, headers=headers)
    assert first.status_code == 200 and first.json()["status"] == "approved", first.text
    others = [ask(), {**read, "args": {"path": "other.txt"}}, {**read, "risk": "SEND"},
              {**read, "policy_id": "s-2"}, {**read, "targets": ["x"]},
              {**read, "content": ["path"]}]
    for body in others:
        answer = await client.post("/v1/approvals", json=body, headers=headers)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["detail"] == ("Idempotency-Key k-bound was used for a "
                                           "different request")
    assert (await client.get("/approvals")).json()["items"] == []
    again = await client.post("/v1/approvals", json={**read, "why": "retry", "goal": "g"},
                              headers=headers)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


async def test_a_key_stored_before_keys_were_bound_replays_only_its_own_action(
        node: Running, client: httpx.AsyncClient) -> None:
    """A request stored without a digest (by 0.2) replays for the same action and gives
    422 for another one."""
    made = await client.post("/v1/approvals", json=ask())
    stored = await node.node.store.get_approval(made.json()["id"])
    assert stored is not None
    old = stored.model_copy(update={"id": ids.approval_id(), "request_digest": None,
                                    "idempotency_key": "web:admin k-old"})
    assert await node.node.store.commit(Change(at=old.requested_at, approval=old,
                                               insert_approval=True))
    headers = {"Idempotency-Key": "k-old"}
    same = await client.post("/v1/approvals", json=ask(), headers=headers)
    assert same.json()["id"] == old.id
    other = await client.post("/v1/approvals", json=ask(args={**ASK["args"], "to": "eve@x"}),
                              headers=headers)
    assert other.status_code == 422, other.text


async def test_concurrent_requests_with_one_key_make_one_request(
        client: httpx.AsyncClient) -> None:
    """Ten racing POSTs with the same key store one request and all answer with it."""
    headers = {"Idempotency-Key": "race-1"}
    answers = await asyncio.gather(*(client.post("/v1/approvals", json=ask(), headers=headers)
                                     for _ in range(10)))
    assert {a.status_code for a in answers} == {202}
    assert len({a.json()["id"] for a in answers}) == 1
    assert len((await client.get("/approvals")).json()["items"]) == 1


async def test_a_session_grant_covers_its_policy_id_only(client: httpx.AsyncClient,
                                                         agent: httpx.AsyncClient) -> None:
    """Approved for the session: the same action of that policy_id, asked by the same key,
    runs; another policy_id, another target, or another key naming the same policy_id
    (it is the caller's to choose, so it could be guessed) asks again."""
    approval_id = await pending(agent)
    await client.post(f"/approvals/{approval_id}/approve", json={"scope": "session"})
    again = await agent.post("/v1/approvals", json=ask(args={**ASK["args"], "body": "other"}))
    assert again.status_code == 200, again.text
    assert again.json()["decision"] == "ALLOW" and "session grant" in again.json()["reason"]
    elsewhere = await agent.post("/v1/approvals", json=ask(policy_id="s-2"))
    assert elsewhere.status_code == 202
    other_target = await agent.post("/v1/approvals",
                                    json=ask(args={**ASK["args"], "to": "eve@example.com"}))
    assert other_target.status_code == 202
    borrowed = await client.post("/v1/approvals", json=ask(args={**ASK["args"], "body": "b"}))
    assert borrowed.status_code == 202, borrowed.text


async def test_a_grant_covers_the_tool_definition_it_was_asked_with(
        client: httpx.AsyncClient, agent: httpx.AsyncClient) -> None:
    """A request naming its tool's ``definition``: an Always covers that definition
    only (the same call under another definition asks again), the key bound to it
    replays only with it, and a definition that is not one printable word is a 422."""
    shown = {"tool": "notes.act", "args": {"path": "notes"}, "requester": "gate",
             "policy_id": "g-1", "definition": "sha256:aaaa"}
    first = await agent.post("/v1/approvals", json=shown, headers={"Idempotency-Key": "d1"})
    assert first.status_code == 202, first.text
    await client.post(f"/approvals/{first.json()['id']}/approve", json={"scope": "always"})
    same = await agent.post("/v1/approvals", json=shown)
    assert same.status_code == 200 and same.json()["decision"] == "ALLOW", same.text
    redefined = await agent.post("/v1/approvals", json={**shown, "definition": "sha256:bbbb"})
    assert redefined.status_code == 202, redefined.text
    unnamed = await agent.post("/v1/approvals", json={k: v for k, v in shown.items()
                                                      if k != "definition"})
    assert unnamed.status_code == 202, unnamed.text
    replayed = await agent.post("/v1/approvals", json={**shown, "definition": "sha256:cccc"},
                                headers={"Idempotency-Key": "d1"})
    assert replayed.status_code == 422, replayed.text
    for bad in ("", "two words", "x" * 129):
        refused = await agent.post("/v1/approvals", json={**shown, "definition": bad})
        assert refused.status_code == 422 and "definition" in refused.text, bad


async def test_a_task_grant_never_covers_an_outside_request(
        node: Running, client: httpx.AsyncClient) -> None:
    """An always grant of a task does not answer an outside request under the same id."""
    steps = [{"tool": "send_email", "args": ASK["args"]}]
    task_id = (await client.post("/tasks", json={"goal": "mail", "steps": steps})).json()["id"]
    await wait_state(client, task_id, "waiting_approval")
    approved = await client.post(f"/tasks/{task_id}/approve", json={"scope": "always"})
    assert approved.status_code == 200
    response = await client.post("/v1/approvals", json=ask(policy_id=task_id))
    assert response.status_code == 202


async def test_one_of_many_concurrent_approvals_wins(client: httpx.AsyncClient,
                                                     agent: httpx.AsyncClient) -> None:
    """Racing approve/deny calls: exactly one 200, the rest 409; one decision audited."""
    approval_id = await pending(agent)
    answers = await asyncio.gather(
        *(client.post(f"/approvals/{approval_id}/approve") for _ in range(4)),
        *(client.post(f"/approvals/{approval_id}/deny") for _ in range(4)))
    assert sorted(a.status_code for a in answers) == [200] + [409] * 7
    decisions = [e for e in await audit_of(client, approval_id) if e["kind"] == "decision"]
    assert len(decisions) == 1


async def test_outcome_is_recorded_once(client: httpx.AsyncClient,
                                        agent: httpx.AsyncClient) -> None:
    """The caller reports what it did once (kind outcome); a second report is 409."""
    approval_id = await pending(agent)
    early = await client.post(f"/v1/approvals/{approval_id}/outcome", json={"ok": True})
    assert early.status_code == 409 and "pending" in early.json()["detail"]
    await client.post(f"/approvals/{approval_id}/approve")
    first = await client.post(f"/v1/approvals/{approval_id}/outcome",
                              json={"ok": False, "detail": "smtp said 550"})
    assert first.status_code == 200, first.text
    assert first.json()["outcome"]["ok"] is False
    second = await client.post(f"/v1/approvals/{approval_id}/outcome", json={"ok": True})
    assert second.status_code == 409 and "already reported" in second.json()["detail"]
    outcomes = [e for e in await audit_of(client, approval_id) if e["kind"] == "outcome"]
    assert [(e["decision"], e["reason"], e["actor"]) for e in outcomes] == [
        ("error", "smtp said 550", "web:admin")]
    missing = await client.post("/v1/approvals/a-nope/outcome", json={"ok": True})
    assert missing.status_code == 404


async def test_concurrent_outcome_reports_record_one(client: httpx.AsyncClient,
                                                     agent: httpx.AsyncClient) -> None:
    """Racing outcome reports: one 200, the others 409, one audit event."""
    approval_id = await pending(agent)
    await client.post(f"/approvals/{approval_id}/approve")
    answers = await asyncio.gather(*(client.post(f"/v1/approvals/{approval_id}/outcome",
                                                 json={"ok": True}) for _ in range(6)))
    assert sorted(a.status_code for a in answers) == [200] + [409] * 5
    outcomes = [e for e in await audit_of(client, approval_id) if e["kind"] == "outcome"]
    assert len(outcomes) == 1


async def test_approvals_lists_tasks_and_outside_requests(client: httpx.AsyncClient) -> None:
    """GET /approvals lists both kinds; outside ones have task_id null, requester, policy_id."""
    steps = [{"tool": "delete_file", "args": {"path": "old.txt"}}]
    task_id = (await client.post("/tasks", json={"goal": "tidy", "steps": steps})).json()["id"]
    await wait_state(client, task_id, "waiting_approval")
    approval_id = await pending(client)
    items = (await client.get("/approvals", params={"status": "pending"})).json()["items"]
    by_task = {i["task_id"]: i for i in items}
    assert set(by_task) == {task_id, None}
    outside = by_task[None]
    assert outside["id"] == approval_id and outside["requester"] == "hermes:alice@laptop"
    assert outside["policy_id"] == "s-1" and outside["why"] == "tell John it shipped"
    assert by_task[task_id]["policy_id"] == task_id and by_task[task_id]["requester"] is None


async def test_approvals_route_decides_a_task_request_too(client: httpx.AsyncClient) -> None:
    """POST /approvals/{id}/approve decides a task's request: the task runs on."""
    steps = [{"tool": "delete_file", "args": {"path": "old.txt"}}]
    task_id = (await client.post("/tasks", json={"goal": "tidy", "steps": steps})).json()["id"]
    task = await wait_state(client, task_id, "waiting_approval")
    answer = await client.post(f"/approvals/{task['approval']['id']}/deny",
                               json={"reason": "keep it"})
    assert answer.status_code == 200 and answer.json()["task_id"] == task_id
    task = await wait_state(client, task_id, "failed")
    assert task["result"]["reason"] == "user denied: keep it"


async def test_long_poll_answers_when_the_decision_lands(node: Running,
                                                          client: httpx.AsyncClient,
                                                          agent: httpx.AsyncClient) -> None:
    """A waiting GET ?wait= is woken by the decision itself, not by a periodic re-check."""
    node.node.decider.watch.recheck = 3600.0  # only the decider's wake-up can end the wait
    approval_id = await pending(agent)
    waiter = asyncio.create_task(client.get(f"/v1/approvals/{approval_id}",
                                            params={"wait": "60s"}, timeout=120))
    for _ in range(500):
        if node.node.decider.watch.waiting:
            break
        await asyncio.sleep(0.01)
    assert node.node.decider.watch.waiting == 1
    await client.post(f"/approvals/{approval_id}/approve", json={"scope": "session"})
    answer = await waiter
    assert answer.json()["status"] == "approved" and answer.json()["scope"] == "session"
    assert node.node.decider.watch.waiting == 0


async def test_wait_is_capped_and_checked() -> None:
    """?wait= accepts seconds and units, is capped at MAX_WAIT, and 0 without it."""
    assert wait_seconds(None) == 0.0
    assert wait_seconds("500ms") == 0.5
    assert wait_seconds("30s") == 30.0
    assert wait_seconds("10m") == MAX_WAIT


async def test_bad_requests_name_the_field(client: httpx.AsyncClient) -> None:
    """422s name the field: a missing policy_id, a bad risk, bad args of a known tool."""
    missing = await client.post("/v1/approvals", json={"tool": "x", "requester": "me"})
    assert missing.status_code == 422 and "policy_id" in missing.json()["detail"]
    risk = await client.post("/v1/approvals", json=ask(risk="HUGE"))
    assert risk.status_code == 422 and "risk" in risk.json()["detail"]
    args = await client.post("/v1/approvals", json=ask(args={"subject": "no recipient"}))
    assert args.status_code == 422 and args.json()["detail"].startswith("args:")
    timeout = await client.post("/v1/approvals", json=ask(timeout="soon"))
    assert timeout.status_code == 422 and "timeout" in timeout.json()["detail"]
    key = await client.post("/v1/approvals", json=ask(), headers={"Idempotency-Key": "a b"})
    assert key.status_code == 422
    unknown = await client.get("/v1/approvals/a-unknown")
    assert unknown.status_code == 404


async def test_requests_need_a_key(node: Running) -> None:
    """Without the API key every approval route answers 401."""
    async with node.client(key=None) as anonymous:
        assert (await anonymous.post("/v1/approvals", json=ask())).status_code == 401
        assert (await anonymous.get("/v1/approvals/a-x")).status_code == 401
        assert (await anonymous.post("/approvals/a-x/approve")).status_code == 401


async def test_an_unanswered_request_expires_and_wakes_its_waiter(tmp_path: Path) -> None:
    """Past its timeout the request is expired (audited as auto:timeout) and a long poll
    waiting for it answers expired."""
    clock = FakeClock()
    async with running_node(tmp_path, clock=clock) as node, node.client() as client:
        node.node.decider.watch.recheck = 3600.0
        approval_id = await pending(client, timeout="2m")
        waiter = asyncio.create_task(client.get(f"/v1/approvals/{approval_id}",
                                                params={"wait": "60s"}, timeout=120))
        for _ in range(500):
            if node.node.decider.watch.waiting:
                break
            await asyncio.sleep(0.01)
        clock.advance(119)
        assert await node.node.decider.expire_due() == []
        assert (await client.get(f"/v1/approvals/{approval_id}")).json()["status"] == "pending"
        clock.advance(2)
        await node.node.decider.expire_due()
        answer = (await waiter).json()
        assert answer["status"] == "expired" and answer["decided_by"] == "auto:timeout"
        assert answer["reason"] == "approval timed out"
        late = await client.post(f"/approvals/{approval_id}/approve")
        assert late.status_code == 409 and late.json()["state"] == "expired"


async def test_budgets_count_the_requests_of_a_policy_id(tmp_path: Path) -> None:
    """policy.budgets: a pending request reserves a unit, a denial releases it."""
    settings = make_settings(tmp_path, policy={"budgets": {"email.send": 1}})
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        first = await pending(client)
        over = await client.post("/v1/approvals", json=ask())
        assert over.status_code == 200 and over.json()["decision"] == "BLOCK"
        assert "budget for email.send used up (1 per policy_id)" in over.json()["reason"]
        assert (await client.post("/v1/approvals", json=ask(policy_id="s-2"))).status_code == 202
        await client.post(f"/approvals/{first}/deny")
        # Another body: the very same request would be "denied earlier" (remember_deny).
        retry = ask(args={**ASK["args"], "body": "y"})
        assert (await client.post("/v1/approvals", json=retry)).status_code == 202


async def test_self_approval_is_refused(tmp_path: Path) -> None:
    """The key that asked cannot approve its own outside request (forbid_self_approval or
    not); another key can."""
    async with running_node(tmp_path) as node, node.client() as client:
        approval_id = await pending(client)
        mine = await client.post(f"/approvals/{approval_id}/approve")
        assert mine.status_code == 403
        async with node.client(key=BOB_KEY) as bob:
            theirs = await bob.post(f"/approvals/{approval_id}/approve")
        assert theirs.status_code == 200 and theirs.json()["decided_by"] == "web:bob"


async def test_a_pending_request_survives_a_restart(tmp_path: Path) -> None:
    """A request made before a restart can be decided after it, and its key still replays."""
    headers = {"Idempotency-Key": "k-restart"}
    async with running_node(tmp_path) as node, node.client() as client:
        first = (await client.post("/v1/approvals", json=ask(), headers=headers)).json()["id"]
    async with running_node(tmp_path) as node, node.client() as client, \
            node.client(BOB_KEY) as bob:
        replay = await client.post("/v1/approvals", json=ask(), headers=headers)
        assert replay.json()["id"] == first
        assert (await bob.post(f"/approvals/{first}/approve")).status_code == 200


async def test_the_console_decides_an_outside_request(node: Running,
                                                      client: httpx.AsyncClient,
                                                      agent: httpx.AsyncClient) -> None:
    """A console press on an outside request's card decides it; the card shows who asked,
    its own fragment renders, and an escaped requester never becomes markup."""
    approval_id = await pending(agent, requester="<b>bot</b>")
    page = (await client.get("/")).text
    assert "&lt;b&gt;bot&lt;/b&gt;" in page and "<b>bot</b>" not in page
    fragment = await client.get(f"/console/cards/{approval_id}")
    assert fragment.status_code == 200 and "s-1" in fragment.text
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert token is not None
    answer = await client.post("/console/decide", data={
        "approval_id": approval_id, "scope": "once", "csrf": token.group(1), "next": "/"},
        headers={"origin": BASE})
    assert answer.status_code == 303
    status = (await client.get(f"/v1/approvals/{approval_id}")).json()
    assert status["status"] == "approved" and status["decided_by"] == "web:admin"


async def test_a_decision_on_another_node_reaches_a_waiting_agent(tmp_path: Path) -> None:
    """Two daemons on one database: node B decides, node A's long poll (whose own wake-up
    never fires) answers after its periodic re-check."""
    async with running_node(tmp_path) as a, running_node(tmp_path) as b, \
            a.client(BOB_KEY) as on_a, b.client() as on_b:
        a.node.decider.watch.recheck = 0.05
        approval_id = await pending(on_a)
        waiter = asyncio.create_task(on_a.get(f"/v1/approvals/{approval_id}",
                                              params={"wait": "60s"}, timeout=120))
        for _ in range(500):
            if a.node.decider.watch.waiting:
                break
            await asyncio.sleep(0.01)
        assert (await on_b.post(f"/approvals/{approval_id}/approve")).status_code == 200
        answer = (await waiter).json()
    assert answer["status"] == "approved"


async def test_the_tools_description_is_on_the_card_and_binds_nothing(
        client: httpx.AsyncClient, agent: httpx.AsyncClient) -> None:
    """A request's ``description`` (what the tool says it does, as the agent was shown
    it) is on its card as the server's words; it is display only: an Always covers the
    call whatever it says, and an idempotency key replays with another one. A built-in
    tool's card never carries a caller's description. Over 1,000
    characters, or with control characters other than line breaks, it is a 422 naming
    the field."""
    shown = {"tool": "notes.act", "args": {"path": "notes"}, "requester": "gate",
             "policy_id": "dsc-1", "definition": "sha256:aaaa",
             "description": "Look at a path.\nChanges <i>nothing</i>."}
    first = await agent.post("/v1/approvals", json=shown, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 202, first.text
    approval_id = first.json()["id"]
    card = (await client.get(f"/console/cards/{approval_id}")).text
    assert "The server describes this tool as" in card
    assert "Look at a path. Changes &lt;i&gt;nothing&lt;/i&gt;." in card, card
    replayed = await agent.post("/v1/approvals", json={**shown, "description": "Other."},
                                headers={"Idempotency-Key": "k1"})
    assert replayed.status_code == 202 and replayed.json()["id"] == approval_id, replayed.text
    await client.post(f"/approvals/{approval_id}/approve", json={"scope": "always"})
    for said in ("Says something else now.", None):
        again = await agent.post("/v1/approvals", json={**shown, "description": said})
        assert again.status_code == 200 and again.json()["decision"] == "ALLOW", again.text
    for bad in ("", "x" * 1_001, "bell\x07", "nul\x00"):
        refused = await agent.post("/v1/approvals", json={**shown, "description": bad})
        assert refused.status_code == 422 and "description" in refused.text, bad
    fits = await agent.post("/v1/approvals", json={**shown, "policy_id": "dsc-2",
                                                    "description": "y" * 1_000})
    assert fits.status_code == 202, fits.text
    built_in = await agent.post("/v1/approvals", json=ask(description="Harmless, really."))
    assert built_in.status_code == 202, built_in.text  # signoff's own tool: its own words
    card = (await client.get(f"/console/cards/{built_in.json()['id']}")).text
    assert "Send email" in card and "Harmless" not in card, card
