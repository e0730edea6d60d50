"""A Cedar policy file on a running node: outside requests and tasks, as a user sees them.

The principal of an outside request is the API key that asked (``web:bob``), never the
request's self-declared ``requester`` label; a permit runs a SEND as an audited automatic
approval; a forbid refuses at once; ``@ask`` makes a person answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.api.helpers import BOB_KEY, make_settings, running_node, wait_state

POLICY = """
@id("bob-mail")
permit(principal == Signoff::Principal::"web:bob", action == Signoff::Action::"send_email",
       resource) when { resource.name like "*@example.com" };

@id("no-prod")
forbid(principal, action, resource) when { resource.name like "*prod*" };

@id("ask-notes")
@ask
permit(principal, action == Signoff::Action::"read_file", resource)
  when { resource.name like "*notes*" };
"""


def ask(to: str, requester: str = "hermes:bob@laptop") -> dict[str, Any]:
    """An outside request to mail ``to``."""
    return {"tool": "send_email", "args": {"to": to, "subject": "hi", "body": "x"},
            "requester": requester, "policy_id": "s-1"}


def settings_with_policy(tmp_path: Path) -> Any:
    """A test node whose [policy] names a Cedar file in its work dir's parent."""
    cedar = tmp_path / "policy.cedar"
    cedar.write_text(POLICY, encoding="utf-8")
    return make_settings(tmp_path / "work", policy={"cedar": str(cedar)})


async def test_outside_requests_are_judged_by_the_key_that_asked(tmp_path: Path) -> None:
    """bob's key is permitted to mail example.com (approved by auto:cedar, audited);
    the admin key asking the same is asked about; a caller labelling itself "web:bob"
    borrows nothing; a forbidden recipient is refused at once."""
    settings = settings_with_policy(tmp_path)
    async with running_node(tmp_path / "work", settings=settings) as node, \
            node.client(BOB_KEY) as bob, node.client() as admin:
        permitted = await bob.post("/v1/approvals", json=ask("john@example.com"))
        assert permitted.status_code == 200, permitted.text
        assert permitted.json()["status"] == "approved"
        status = (await admin.get(f"/v1/approvals/{permitted.json()['id']}")).json()
        assert status["decided_by"] == "auto:cedar"
        events = (await admin.get("/audit", params={"limit": 50})).json()["items"]
        assert any("bob-mail" in (e.get("reason") or "") for e in events)

        borrowed = await admin.post("/v1/approvals", json=ask("john@example.com", "web:bob"))
        assert borrowed.status_code == 202 and borrowed.json()["status"] == "pending"

        refused = await bob.post("/v1/approvals", json=ask("ops@prod.example.com"))
        assert refused.status_code == 200, refused.text
        assert refused.json()["status"] == "denied"
        detail = (await admin.get(f"/v1/approvals/{refused.json()['id']}")).json()
        assert "no-prod" in (detail.get("reason") or "")


async def test_ask_makes_a_task_read_wait_for_a_person(tmp_path: Path) -> None:
    """A task's READ of notes waits for approval under ``@ask``; another read runs."""
    settings = settings_with_policy(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("n", encoding="utf-8")
    (work / "plain.txt").write_text("p", encoding="utf-8")
    async with running_node(work, settings=settings) as node, node.client() as admin:
        steps = [{"tool": "read_file", "args": {"path": "plain.txt"}},
                 {"tool": "read_file", "args": {"path": "notes.txt"}}]
        created = await admin.post("/tasks", json={"goal": "read both", "steps": steps})
        assert created.status_code in (200, 201, 202), created.text
        task = await wait_state(admin, created.json()["id"], "waiting_approval")
        assert task["pending_action"]["args"]["path"] == "notes.txt"
        events = (await admin.get("/audit", params={"limit": 50})).json()["items"]
        asked = [e for e in events if e["kind"] == "evaluation" and e["decision"] == "ASK_USER"]
        assert [e["targets"] for e in asked] == [["notes.txt"]]
        assert "ask-notes" in asked[0]["reason"]
