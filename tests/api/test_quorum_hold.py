"""Quorum ([policy.quorum]) and the undo window (approvals.hold) over the HTTP API."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import RiskClass
from tests.api.helpers import (
    BOB_KEY,
    KEY,
    eventually,
    running_node,
    state_beside,
    wait_state,
    webhook_steps,
)
from tests.factories import NoopTool
from tests.fakes.http_echo import HttpEcho

CAROL_KEY = "carol-key-0123456789abcdef"
ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1"}


def settings_with(tmp_path: Path, **sections: Any) -> Settings:
    """A node with three API keys (admin, bob, carol) and the given sections."""
    data: dict[str, Any] = {
        "daemon": {"work_dir": str(tmp_path), "host": "127.0.0.1", "node_id": "test-node",
                   "state_dir": str(state_beside(tmp_path))},
        "api": {"key": KEY, "keys": [{"name": "bob", "key": BOB_KEY},
                                     {"name": "carol", "key": CAROL_KEY}]},
        **sections}
    return Settings.model_validate(data)


async def ask(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/approvals", json=ASK)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def submit_goal(client: httpx.AsyncClient, url: str) -> str:
    response = await client.post("/tasks", json={"goal": "hook", "steps": webhook_steps(url)})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def kinds(client: httpx.AsyncClient, approval_id: str) -> list[tuple[str, str | None]]:
    events = (await client.get("/audit", params={"limit": 500})).json()["items"]
    return [(e["kind"], e["actor"]) for e in events if e["approval_id"] == approval_id]


async def test_two_people_must_approve_an_outside_request(tmp_path: Path) -> None:
    """Under a quorum of 2 the first approval answers 200 pending 1 of 2, the requester
    is refused (403), a repeat counts once (409), the second approval decides."""
    settings = settings_with(tmp_path, policy={"quorum": {"SEND": 2}})
    async with running_node(tmp_path, settings=settings) as node, \
            node.client() as admin, node.client(key="bob-key-0123456789abcdef") as bob, \
            node.client(key=CAROL_KEY) as carol:
        approval_id = await ask(carol)
        own = await carol.post(f"/approvals/{approval_id}/approve")
        assert own.status_code == 403, own.text
        first = await admin.post(f"/approvals/{approval_id}/approve")
        assert first.status_code == 200, first.text
        body = first.json()
        assert (body["status"], body["approvals"], body["needed"]) == ("pending", 1, 2)
        again = await admin.post(f"/approvals/{approval_id}/approve")
        assert again.status_code == 409 and "counts once" in again.json()["detail"]
        listed = (await admin.get("/approvals")).json()["items"]
        assert [(i["id"], i["approvals"], i["needed"]) for i in listed] == [(approval_id, 1, 2)]
        second = await bob.post(f"/approvals/{approval_id}/approve", json={"scope": "session"})
        assert second.status_code == 200
        done = second.json()
        assert (done["status"], done["approvals"], done["scope"]) == ("approved", 2, "once")
        assert await kinds(admin, approval_id) == [
            ("evaluation", None), ("refused", "web:carol"), ("approval_partial", "web:admin"),
            ("refused", "web:admin"), ("decision", "web:bob")]
        card = node.web.card(approval_id)
        assert card is not None


async def test_one_deny_denies_a_quorum(tmp_path: Path) -> None:
    """After one approval of two, a single deny denies the request."""
    settings = settings_with(tmp_path, policy={"quorum": {"email.send": 2}})
    async with running_node(tmp_path, settings=settings) as node, \
            node.client() as admin, node.client(key=CAROL_KEY) as carol:
        approval_id = await ask(carol)
        assert (await admin.post(f"/approvals/{approval_id}/approve")).json()["approvals"] == 1
        denied = await carol.post(f"/approvals/{approval_id}/deny", json={"reason": "no"})
        assert denied.status_code == 200 and denied.json()["status"] == "denied"
        late = await admin.post(f"/approvals/{approval_id}/approve")
        assert late.status_code == 409


async def test_racing_approvals_of_a_quorum_are_all_counted(tmp_path: Path) -> None:
    """Three approvals at once under a quorum of 3: none is lost, the request is approved
    by exactly the three of them."""
    settings = settings_with(tmp_path, policy={"quorum": {"SEND": 3}})
    async with running_node(tmp_path, settings=settings) as node, \
            node.client() as admin, node.client(key="bob-key-0123456789abcdef") as bob, \
            node.client(key=CAROL_KEY) as carol:
        approval_id = (await admin.post("/v1/approvals", json={**ASK})).json()["id"]
        # The requester (admin) never counts; bob and carol approve at the same moment.
        answers = await asyncio.gather(*(c.post(f"/approvals/{approval_id}/approve")
                                         for c in (bob, carol)))
        assert sorted(a.json()["approvals"] for a in answers) == [1, 2]
        status = (await admin.get(f"/v1/approvals/{approval_id}")).json()
        assert (status["status"], status["approvals"]) == ("pending", 2)


async def test_a_held_outside_request_reads_held_then_approved(tmp_path: Path) -> None:
    """With a 30s hold the approval answers "held" with hold_until; a long poll keeps
    waiting through the hold and answers approved once it is released."""
    clock = FakeClock()
    settings = settings_with(tmp_path, approvals={"hold": {"SEND": "30s"}})
    async with running_node(tmp_path, settings=settings, clock=clock) as node, \
            node.client() as admin, node.client(BOB_KEY) as agent:
        node.node.decider.watch.recheck = 3600.0
        approval_id = await ask(agent)
        held = (await admin.post(f"/approvals/{approval_id}/approve")).json()
        assert held["status"] == "held" and held["hold_until"]
        waiter = asyncio.create_task(admin.get(f"/v1/approvals/{approval_id}",
                                               params={"wait": "60s"}, timeout=120))
        await eventually(lambda: _true(node.node.decider.watch.waiting > 0), what="a waiter")
        clock.advance(29)
        await node.node.decider.release_due()
        assert not waiter.done()
        clock.advance(2)
        await node.node.decider.release_due()
        answer = (await waiter).json()
        assert answer["status"] == "approved" and answer["decided_by"] == "web:admin"
        late = await admin.post(f"/approvals/{approval_id}/undo")
        assert late.status_code == 409, late.text
        assert [k for k, _ in await kinds(admin, approval_id)] == [
            "evaluation", "decision", "released", "refused"]


async def test_undo_within_the_hold_denies_the_task(tmp_path: Path) -> None:
    """A task's approved SEND action waits out its hold; Undo in time denies it ("undone
    by …"), the action never runs and the audit log has the approval and the undo."""
    clock = FakeClock()
    settings = settings_with(tmp_path, approvals={"hold": {"SEND": "1m"}})
    async with HttpEcho() as echo, \
            running_node(tmp_path, settings=settings, clock=clock) as node, \
            node.client() as admin:
        task_id = await submit_goal(admin, echo.url("/hook"))
        task = await wait_state(admin, task_id, "waiting_approval")
        approval_id = task["approval"]["id"]
        held = (await admin.post(f"/approvals/{approval_id}/approve")).json()
        assert held["status"] == "held"
        task = (await admin.get(f"/tasks/{task_id}")).json()
        assert task["state"] == "waiting_approval" and task["approval"]["status"] == "held"
        clock.advance(30)
        undone = await admin.post(f"/approvals/{approval_id}/undo")
        assert undone.status_code == 200, undone.text
        assert undone.json()["status"] == "denied"
        assert undone.json()["reason"] == "undone by web:admin"
        task = await wait_state(admin, task_id, "failed")
        clock.advance(60)
        await node.node.decider.release_due()
        assert [r for r in echo.requests if r.path == "/hook"] == []
        assert [k for k, _ in await kinds(admin, approval_id)] == [
            "evaluation", "decision", "undo"]


async def test_a_held_task_runs_once_after_its_window(tmp_path: Path) -> None:
    """Not before hold_until, then exactly once."""
    clock = FakeClock()
    settings = settings_with(tmp_path, approvals={"hold": {"SEND": "10s"}})
    async with HttpEcho() as echo, \
            running_node(tmp_path, settings=settings, clock=clock) as node, \
            node.client() as admin:
        task_id = await submit_goal(admin, echo.url("/hook"))
        task = await wait_state(admin, task_id, "waiting_approval")
        approval_id = task["approval"]["id"]
        await admin.post(f"/approvals/{approval_id}/approve")
        await node.node.decider.release_due()
        await asyncio.sleep(0.2)
        assert [r for r in echo.requests if r.path == "/hook"] == []
        clock.advance(11)
        await asyncio.gather(node.node.decider.release_due(), node.node.decider.release_due())
        await wait_state(admin, task_id, "completed")
        assert len([r for r in echo.requests if r.path == "/hook"]) == 1
        never = await admin.post(f"/approvals/{approval_id}/undo")
        assert never.status_code == 409


async def _true(value: bool) -> bool:
    return value



async def test_under_a_quorum_each_approval_counts_for_the_whole_group(
        tmp_path: Path) -> None:
    """Two identical requests share one card under a quorum of 2: one approval leaves both
    pending, the second (another person) approves both, each audited."""
    settings = settings_with(tmp_path, policy={"quorum": {"SEND": 2}})
    async with running_node(tmp_path, settings=settings) as node, \
            node.client() as admin, node.client(key="bob-key-0123456789abcdef") as bob, \
            node.client(key=CAROL_KEY) as carol:
        ids = [(await carol.post("/v1/approvals", json={**ASK, "policy_id": p})).json()["id"]
               for p in ("s-1", "s-2")]
        listed = (await admin.get("/approvals")).json()["items"]
        assert {i["id"]: i["coalesced_into"] for i in listed} == {ids[0]: None, ids[1]: ids[0]}
        first = (await admin.post(f"/approvals/{ids[0]}/approve")).json()
        assert (first["status"], first["approvals"], first["needed"]) == ("pending", 1, 2)
        assert (await admin.get(f"/v1/approvals/{ids[1]}")).json()["status"] == "pending"
        assert (await bob.post(f"/approvals/{ids[0]}/approve")).status_code == 200
        states = [(await admin.get(f"/v1/approvals/{i}")).json()["status"] for i in ids]
        assert states == ["approved", "approved"]
        assert ("decision", "web:bob") in await kinds(admin, ids[1])
        assert node.web.card(ids[1]) is None  # the member never had a card of its own


async def test_a_shared_card_held_then_released_runs_every_member_once(
        tmp_path: Path) -> None:
    """Two tasks share a card under a hold: approving holds it and runs neither; after the
    window the leader runs and the member follows (not held a second time), each once."""
    clock = FakeClock()
    settings = settings_with(tmp_path, approvals={"hold": {"SEND": "10s"}})
    async with HttpEcho() as echo, \
            running_node(tmp_path, settings=settings, clock=clock) as node, \
            node.client() as admin:
        tasks = [await submit_goal(admin, echo.url("/hook")) for _ in range(2)]
        approvals = [(await wait_state(admin, t, "waiting_approval"))["approval"]["id"]
                     for t in tasks]
        held = (await admin.post(f"/approvals/{approvals[0]}/approve")).json()
        assert held["status"] == "held"
        await node.node.decider.settle_coalesced()
        await asyncio.sleep(0.2)
        assert [r for r in echo.requests if r.path == "/hook"] == []
        assert (await admin.get(f"/tasks/{tasks[1]}")).json()["state"] == "waiting_approval"
        clock.advance(11)
        await node.node.decider.release_due()
        await node.node.decider.settle_coalesced()
        for task_id in tasks:
            await wait_state(admin, task_id, "completed")
        assert len([r for r in echo.requests if r.path == "/hook"]) == 2
        member = (await admin.get(f"/tasks/{tasks[1]}")).json()
        assert member["approval"]["status"] == "approved"


async def test_a_requesters_vote_on_a_shared_card_never_counts_for_their_own_request(
        tmp_path: Path) -> None:
    """Under a quorum of 2, bob's approval of the card his own identical request shares
    counts for the others only: his request is not approved by it, gets a card of its
    own, and waits for two people other than bob."""
    settings = settings_with(tmp_path, policy={"quorum": {"SEND": 2}})
    async with running_node(tmp_path, settings=settings) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob, node.client(key=CAROL_KEY) as carol:
        leader = await ask(carol)
        mine = (await bob.post("/v1/approvals", json={**ASK, "policy_id": "s-2"})).json()["id"]
        listed = (await admin.get("/approvals")).json()["items"]
        assert {i["id"]: i["coalesced_into"] for i in listed} == {leader: None, mine: leader}
        assert (await bob.post(f"/approvals/{leader}/approve")).json()["approvals"] == 1
        done = await admin.post(f"/approvals/{leader}/approve")
        assert done.status_code == 200 and done.json()["status"] == "approved"
        status = (await admin.get(f"/v1/approvals/{mine}")).json()
        assert (status["status"], status["approvals"]) == ("pending", 0)
        listed = (await admin.get("/approvals")).json()["items"]
        assert [(i["id"], i["coalesced_into"]) for i in listed] == [(mine, None)]

        async def own_card() -> bool:
            card = node.web.card(mine)
            return card is not None and card.status == "pending"
        await eventually(own_card, what="a card of bob's own request")
        assert (await carol.post(f"/approvals/{mine}/approve")).json()["approvals"] == 1
        final = await admin.post(f"/approvals/{mine}/approve")
        assert final.json()["status"] == "approved" and final.json()["approvals"] == 2


def people_settings(tmp_path: Path, **sections: Any) -> Settings:
    """Robert holds two keys: ``web:bob`` and ``web:carol`` are one person."""
    return settings_with(tmp_path, people=[{"name": "robert",
                                            "accounts": ["web:bob", "web:carol"]}], **sections)


async def test_two_accounts_of_one_person_give_one_vote(tmp_path: Path) -> None:
    """Under a quorum of 2, Robert approving with one key and then another counts once
    (409) and the request stays pending; the card names him, not his key."""
    settings = people_settings(tmp_path, policy={"quorum": {"SEND": 2}})
    async with running_node(tmp_path, settings=settings) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob, node.client(key=CAROL_KEY) as also_bob:
        approval_id = await ask(admin)
        assert (await bob.post(f"/approvals/{approval_id}/approve")).json()["approvals"] == 1
        again = await also_bob.post(f"/approvals/{approval_id}/approve")
        assert again.status_code == 409 and "counts once" in again.json()["detail"]
        status = (await admin.get(f"/v1/approvals/{approval_id}")).json()
        assert (status["status"], status["approvals"]) == ("pending", 1)

        async def named() -> bool:
            card = node.web.card(approval_id)
            return card is not None and card.progress == "1 of 2 approvals (robert)"
        await eventually(named, what=f"the card naming robert: {node.web.card(approval_id)}")


async def test_self_approval_across_linked_accounts_is_refused(tmp_path: Path) -> None:
    """An outside request asked with Robert's one key cannot be approved with his other
    key, by a route or in a batch (403); someone else approves it."""
    settings = people_settings(tmp_path)
    async with running_node(tmp_path, settings=settings) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob, node.client(key=CAROL_KEY) as also_bob:
        approval_id = await ask(bob)
        own = await also_bob.post(f"/approvals/{approval_id}/approve")
        assert own.status_code == 403 and "someone else" in own.json()["detail"]
        batch = await also_bob.post("/approvals/batch",
                                    json={"ids": [approval_id], "decision": "once"})
        assert [r["status"] for r in batch.json()["results"]] == [403]
        assert (await admin.get(f"/v1/approvals/{approval_id}")).json()["status"] == "pending"
        theirs = await admin.post(f"/approvals/{approval_id}/approve")
        assert theirs.status_code == 200 and theirs.json()["decided_by"] == "web:admin"


@dataclass
class DeployTool(NoopTool):
    """DESTRUCTIVE on target "prod", SEND anywhere else (its risk depends on its args)."""

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        """DESTRUCTIVE for prod."""
        return RiskClass.DESTRUCTIVE if args.get("target") == "prod" else RiskClass.SEND


async def test_an_edit_into_a_held_class_waits_out_that_hold(tmp_path: Path) -> None:
    """Only DESTRUCTIVE actions have an undo window (10 minutes). A SEND deploy to staging
    approved as edited into a DESTRUCTIVE deploy to prod is held like one: the answer
    says "held", nothing runs, and Undo within the window denies it."""
    clock = FakeClock()
    settings = settings_with(tmp_path, approvals={"hold": {"DESTRUCTIVE": "10m"}})
    async with running_node(tmp_path, settings=settings, clock=clock) as node, \
            node.client() as admin:
        deploy = DeployTool(name="deploy", capability="app.deploy")
        node.node.registry.register(deploy)
        made = await admin.post("/tasks", json={"goal": "ship", "steps": [
            {"tool": "deploy", "args": {"target": "staging"}}]})
        task = await wait_state(admin, made.json()["id"], "waiting_approval")
        approval_id = task["approval"]["id"]
        edited = await admin.post(f"/approvals/{approval_id}/approve",
                                  json={"args": {"target": "prod"}})
        assert edited.status_code == 200, edited.text
        assert edited.json()["status"] == "held" and edited.json()["hold_until"]
        clock.advance(60)
        undone = await admin.post(f"/approvals/{approval_id}/undo")
        assert undone.status_code == 200 and undone.json()["status"] == "denied"
        await wait_state(admin, task["id"], "failed")
        assert deploy.runs == 0
