"""Passkey step-up over the HTTP API with a software authenticator (no browser): a quorum
where each person confirms with their own passkey, deny and the task routes with an
assertion, and who may see, register and revoke passkeys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from signoff.config.settings import Settings
from signoff.runtime import audit as chain
from signoff.runtime.models import RiskClass
from tests.api.helpers import BOB_KEY, KEY, running_node, state_beside, wait_state, webhook_steps
from tests.factories import NoopTool
from tests.fakes.authenticator import SoftAuthenticator

CAROL_KEY = "carol-key-0123456789abcdef"
PASSKEY = {"step_up": ["SEND"], "step_up_with": "passkey"}
ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1"}


def settings_with(tmp_path: Path, *, carol: str = "approver", **sections: Any) -> Settings:
    """A node with keys admin, bob and carol (``carol``: her role) under passkey step-up."""
    return Settings.model_validate({
        "daemon": {"work_dir": str(tmp_path), "host": "127.0.0.1", "node_id": "test-node",
                   "state_dir": str(state_beside(tmp_path))},
        "api": {"key": KEY, "keys": [{"name": "bob", "key": BOB_KEY},
                                     {"name": "carol", "key": CAROL_KEY, "role": carol}]},
        "approvals": PASSKEY, **sections})


async def register(client: httpx.AsyncClient, name: str = "laptop") -> SoftAuthenticator:
    """A new device, registered for the client's key."""
    device = SoftAuthenticator()
    options = (await client.post("/passkeys/register/options")).json()
    made = await client.post("/passkeys/register",
                             json={"name": name, "credential": device.create(options)})
    assert made.status_code == 201, made.text
    return device


async def signed(client: httpx.AsyncClient, device: SoftAuthenticator, approval_id: str,
                 decision: str) -> dict[str, Any]:
    options = await client.get(f"/approvals/{approval_id}/passkey-options",
                               params={"decision": decision})
    assert options.status_code == 200, options.text
    return device.get(options.json())


async def test_each_vote_of_a_quorum_is_confirmed_by_its_own_passkey(tmp_path: Path) -> None:
    """Under a quorum of 2 each approver signs with their own passkey (another's assertion
    is refused); both votes keep their assertion in the audit, which verifies."""
    settings = settings_with(tmp_path, policy={"quorum": {"SEND": 2}})
    async with running_node(tmp_path, settings=settings) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob, node.client(key=CAROL_KEY) as carol:
        asked = await carol.post("/v1/approvals", json=ASK)
        approval_id = asked.json()["id"]
        mine, his = await register(admin), await register(bob, "phone")
        first = await admin.post(f"/approvals/{approval_id}/approve", json={
            "passkey": await signed(admin, mine, approval_id, "once")})
        assert first.json()["status"] == "pending" and first.json()["approvals"] == 1
        borrowed = await signed(admin, mine, approval_id, "once")
        stolen = await bob.post(f"/approvals/{approval_id}/approve", json={"passkey": borrowed})
        assert stolen.status_code == 403 and "someone else" in stolen.json()["detail"]
        second = await bob.post(f"/approvals/{approval_id}/approve", json={
            "passkey": await signed(bob, his, approval_id, "once")})
        assert second.json()["status"] == "approved", second.text
        events = (await admin.get("/audit", params={"limit": 500})).json()["items"]
        kept = {(e["kind"], e["actor"]) for e in events
                if e["approval_id"] == approval_id and e["passkey"]}
        assert kept == {("approval_partial", "web:admin"), ("decision", "web:bob")}
        assert (await chain.verify(node.node.store)).ok


async def test_task_routes_take_an_assertion_and_deny_needs_its_own(tmp_path: Path) -> None:
    """POST /tasks/{id}/approve accepts an assertion; a deny needs one made for deny; an
    edit with a passkey is refused naming args; without step-up there are no options."""
    async with running_node(tmp_path, settings=settings_with(tmp_path)) as node, \
            node.client() as admin, node.client(key=BOB_KEY) as bob:
        device = await register(bob)
        hook = "http://127.0.0.1:9/hook"
        ids = []
        for n in range(2):
            made = await admin.post("/tasks", json={"goal": f"g{n}",
                                                    "steps": webhook_steps(hook, {"n": n})})
            ids.append(await wait_state(admin, made.json()["id"], "waiting_approval"))
        one, two = ids
        edited = await bob.post(f"/tasks/{one['id']}/approve", json={
            "args": {"url": hook, "payload": {"n": 9}},
            "passkey": await signed(bob, device, one["approval"]["id"], "once")})
        assert edited.status_code == 422 and edited.json()["errors"][0]["field"] == "args"
        approved = await bob.post(f"/tasks/{one['id']}/approve", json={
            "passkey": await signed(bob, device, one["approval"]["id"], "once")})
        assert approved.status_code == 200, approved.text
        for_once = await signed(bob, device, two["approval"]["id"], "once")
        wrong = await bob.post(f"/tasks/{two['id']}/deny", json={"passkey": for_once})
        assert wrong.status_code == 403 and "made for 'once'" in wrong.json()["detail"]
        denied = await bob.post(f"/tasks/{two['id']}/deny", json={
            "reason": "no", "passkey": await signed(bob, device, two["approval"]["id"], "deny")})
        assert denied.status_code == 200 and denied.json()["state"] == "failed"
        # DESTRUCTIVE is not in step_up here: decided as usual, no options to ask for.
        asked = await admin.post("/v1/approvals", json={
            "tool": "db.drop", "args": {"table": "t"}, "risk": "DESTRUCTIVE",
            "policy_id": "s-2", "requester": "hermes:alice@laptop"})
        assert asked.status_code == 202, asked.text
        options = await bob.get(f"/approvals/{asked.json()['id']}/passkey-options")
        assert options.status_code == 409 and "not under passkey" in options.json()["detail"]
        plain = await bob.post(f"/approvals/{asked.json()['id']}/deny")
        assert plain.status_code == 200, plain.text


async def test_who_sees_registers_and_revokes_passkeys(tmp_path: Path) -> None:
    """A requester key may not register; an approver sees and revokes only their own
    passkeys; an admin key sees and may revoke everyone's; a revoked one is listed so."""
    settings = settings_with(tmp_path, carol="requester")
    async with running_node(tmp_path, settings=settings) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob, node.client(key=CAROL_KEY) as carol:
        assert (await carol.post("/passkeys/register/options")).status_code == 403
        assert (await carol.get("/passkeys")).status_code == 403
        await register(admin)
        await register(bob, "phone")
        everyone = (await admin.get("/passkeys")).json()["items"]
        assert sorted(p["owner"] for p in everyone) == ["web:admin", "web:bob"]
        his = (await bob.get("/passkeys")).json()["items"]
        assert [p["name"] for p in his] == ["phone"]
        admins = next(p["id"] for p in everyone if p["owner"] == "web:admin")
        assert (await bob.delete(f"/passkeys/{admins}")).status_code == 404
        gone = await admin.delete(f"/passkeys/{his[0]['id']}")
        assert gone.status_code == 200 and gone.json()["revoked_at"]
        assert (await admin.delete(f"/passkeys/{his[0]['id']}")).status_code == 404
        assert (await bob.get("/passkeys")).json()["items"][0]["revoked_at"]
        garbage = await bob.post("/passkeys/register", json={"name": "x", "credential": {}})
        assert garbage.status_code == 422 and garbage.json()["errors"][0]["field"] == "credential"


@dataclass
class DeployTool(NoopTool):
    """DESTRUCTIVE on target "prod", SEND anywhere else (its risk depends on its args)."""

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        """DESTRUCTIVE for prod."""
        return RiskClass.DESTRUCTIVE if args.get("target") == "prod" else RiskClass.SEND


async def test_an_edit_into_a_stepped_up_class_needs_the_passkey(tmp_path: Path) -> None:
    """Only DESTRUCTIVE is under passkey step-up. A key holder without the person's
    passkey may not approve a SEND deploy to staging edited into a DESTRUCTIVE deploy to
    prod (403 naming the passkey, nothing decided); a deploy to qa as asked needs none."""
    settings = settings_with(tmp_path, approvals={"step_up": ["DESTRUCTIVE"],
                                                  "step_up_with": "passkey"})
    async with running_node(tmp_path, settings=settings) as node, \
            node.client() as admin, node.client(key=BOB_KEY) as bob:
        node.node.registry.register(DeployTool(name="deploy", capability="app.deploy"))
        ids = []
        for where in ("staging", "qa"):
            made = await admin.post("/tasks", json={
                "goal": f"ship to {where}", "steps": [{"tool": "deploy",
                                                       "args": {"target": where}}]})
            ids.append(await wait_state(admin, made.json()["id"], "waiting_approval"))
        one, two = ids
        escalated = await bob.post(f"/tasks/{one['id']}/approve",
                                   json={"args": {"target": "prod"}})
        assert escalated.status_code == 403, escalated.text
        assert escalated.json().get("step_up") == "passkey"
        still = (await admin.get(f"/tasks/{one['id']}")).json()
        assert still["state"] == "waiting_approval"
        assert still["approval"]["status"] == "pending"
        plain = await bob.post(f"/tasks/{two['id']}/approve")
        assert plain.status_code == 200, plain.text
