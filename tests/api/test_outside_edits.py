"""Edits of outside requests (POST /v1/approvals): a person may approve other args only
when the caller asked with ``"editable": true``; the edit is re-fingerprinted and judged by
the policy again, and the caller reads the args to run in the decision."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.helpers import BOB_KEY, Running, make_settings, running_node


@pytest.fixture
async def budgeted(tmp_path: Path) -> AsyncIterator[Running]:
    """A node where the capability notes.send has a budget of one request per policy_id."""
    settings = make_settings(tmp_path, policy={"budgets": {"notes.send": 1}})
    async with running_node(tmp_path, settings=settings) as node:
        yield node


async def ask(node: Running, args: dict[str, Any], **extra: Any) -> str:
    """A pending outside request asked with the agent's (requester) key; its id."""
    body = {"tool": "send_note", "args": args, "capability": "notes.send",
            "requester": "agent:test", "policy_id": "p-1", **extra}
    async with node.client(BOB_KEY) as agent:
        asked = await agent.post("/v1/approvals", json=body)
    assert asked.status_code == 202, asked.text
    return str(asked.json()["id"])


async def approve(node: Running, approval_id: str, body: dict[str, Any]) -> Any:
    async with node.client() as person:  # the admin decides
        return await person.post(f"/approvals/{approval_id}/approve", json=body)


async def status(node: Running, approval_id: str) -> dict[str, Any]:
    async with node.client(BOB_KEY) as agent:
        return dict((await agent.get(f"/v1/approvals/{approval_id}")).json())


async def test_a_request_not_asked_editable_cannot_be_edited(node: Running) -> None:
    """Its caller would run its own args: an edit is 422 naming "editable", nothing decided."""
    asked = await ask(node, {"to": "ops", "text": "deploy"})
    refused = await approve(node, asked, {"args": {"to": "ops", "text": "deploy v2"}})
    assert refused.status_code == 422, refused.text
    assert '"editable": true' in refused.json()["detail"]
    assert (await status(node, asked))["status"] == "pending"


async def test_the_caller_reads_the_edited_args(node: Running) -> None:
    """An editable request approved with edited args says "edited" and carries the args;
    the audit event holds the original fingerprint beside the edited one."""
    asked = await ask(node, {"to": "ops", "text": "deploy"}, editable=True)
    answer = await approve(node, asked, {"args": {"to": "ops-2", "text": "deploy v2"}})
    assert answer.status_code == 200, answer.text
    seen = await status(node, asked)
    assert seen["status"] == "approved" and seen["edited"] is True
    assert seen["args"] == {"to": "ops-2", "text": "deploy v2"}
    async with node.client() as admin:
        events = (await admin.get("/audit")).json()["items"]
    [decision] = [e for e in events if e.get("kind") == "decision"]
    assert decision["original_fingerprint"] not in (None, decision["fingerprint"])


async def test_an_unedited_approval_carries_no_args(node: Running) -> None:
    """A plain approval says edited false and no args: the caller runs what it asked."""
    asked = await ask(node, {"to": "ops", "text": "deploy"}, editable=True)
    assert (await approve(node, asked, {})).status_code == 200
    seen = await status(node, asked)
    assert seen["edited"] is False and seen["args"] is None


async def test_an_edit_under_a_budget_is_not_counted_twice(budgeted: Running) -> None:
    """The pending request's reserved unit is the edit's own: a budget of one still lets
    the edited action be approved."""
    asked = await ask(budgeted, {"to": "ops", "text": "deploy"}, editable=True)
    answer = await approve(budgeted, asked, {"args": {"to": "ops", "text": "deploy v2"}})
    assert answer.status_code == 200, answer.text
    assert (await status(budgeted, asked))["edited"] is True


async def test_an_edit_that_drops_a_named_target_is_refused(node: Running) -> None:
    """signoff cannot recompute an unknown tool's targets: an edit must keep each one."""
    asked = await ask(node, {"to": "ops", "text": "deploy"}, editable=True, targets=["ops"])
    refused = await approve(node, asked, {"args": {"to": "everyone", "text": "deploy"}})
    assert refused.status_code == 422, refused.text
    assert "ops" in refused.json()["detail"] and "target" in refused.json()["detail"]
    kept = await approve(node, asked, {"args": {"to": "ops", "text": "deploy v2"}})
    assert kept.status_code == 200, kept.text


async def test_an_edit_cannot_change_the_tool(node: Running) -> None:
    """A changed tool name is a new request: the approve body has no tool field (422)."""
    asked = await ask(node, {"to": "ops", "text": "deploy"}, editable=True)
    refused = await approve(node, asked, {"tool": "wipe", "args": {"to": "ops"}})
    assert refused.status_code == 422, refused.text
    assert (await status(node, asked))["status"] == "pending"


async def test_the_console_offers_the_edit_form_only_for_editable_requests(
        node: Running) -> None:
    """A plain outside request has no edit form (its edit would be refused); an editable
    one has it, and an edit sent from it is what the caller is told to run."""
    from tests.api.helpers import BASE
    from tests.api.test_web_console import csrf

    plain = await ask(node, {"to": "ops", "text": "plain"})
    async with node.client() as admin:
        page = (await admin.get("/")).text
        assert 'name="args"' not in page
        assert (await approve(node, plain, {})).status_code == 200
        editable = await ask(node, {"to": "ops", "text": "draft"}, editable=True)
        page = (await admin.get("/")).text
        assert 'name="args"' in page and "draft" in page
        sent = await admin.post("/console/decide", data={
            "approval_id": editable, "csrf": csrf(page), "next": "/", "scope": "once",
            "args": '{"to": "ops", "text": "final"}'}, headers={"origin": BASE})
        assert sent.status_code == 303, sent.text
    seen = await status(node, editable)
    assert seen["edited"] is True and seen["args"] == {"to": "ops", "text": "final"}
