"""GET /.well-known/signoff-keys: the public keys receipts are checked against."""

from __future__ import annotations

import json
from pathlib import Path

from signoff.runtime import receipts
from signoff.runtime.signing import key_id, unb64u
from tests.api.helpers import running_node, wait_state, webhook_steps
from tests.fakes.http_echo import HttpEcho


async def test_the_keys_are_published_without_a_key_and_sign_the_audit_events(
        tmp_path: Path, echo: HttpEcho) -> None:
    """Anyone may list the keys (no bearer key); the listed key is the one whose kid the
    audit events carry, and a receipt of the decision verifies with it."""
    async with running_node(tmp_path / "work") as node, node.client() as client, \
            node.client(key=None) as anonymous:
        response = await client.post("/tasks", json={
            "goal": "ping", "steps": webhook_steps(echo.url("/hook"))})
        task_id = response.json()["id"]
        await wait_state(client, task_id, "waiting_approval")
        await client.post(f"/tasks/{task_id}/deny", json={"reason": "no"})
        listed = await anonymous.get("/.well-known/signoff-keys")
        assert listed.status_code == 200, listed.text
        keys = listed.json()["keys"]
        assert len(keys) == 1
        key = keys[0]
        assert (key["kty"], key["crv"], key["status"]) == ("OKP", "Ed25519", "active")
        assert key_id(unb64u(key["x"])) == key["kid"]
        events = (await client.get("/audit", params={"task": task_id})).json()["items"]
        assert {e["kid"] for e in events} == {key["kid"]} and all(e["sig"] for e in events)
        body = await receipts.receipt(node.node.store, str(events[-1]["id"]))
        assert receipts.check(json.dumps(body), key["x"]).problem is None
