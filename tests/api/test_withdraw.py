"""Outside requests end cleanly: withdrawn by the one that asked (its cards on Slack and
Telegram say so, a later answer is refused), withdrawn when an SDK wait is cancelled, a
repeated denied request answered at once, and an approval counted as one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.adapters.slack import SlackSurface
from signoff.adapters.telegram import TelegramSurface
from signoff.client import Signoff, SignoffSync
from tests.api.helpers import (
    BOB_KEY,
    KEY,
    Running,
    eventually,
    make_settings,
    running_node,
    serve,
)
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack
from tests.fakes.telegram_api import FakeTelegramApi

CHAT = "-1001234567890"
ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1"}


async def ask(client: httpx.AsyncClient, **changes: Any) -> dict[str, Any]:
    """POST /v1/approvals; the answer's body."""
    response = await client.post("/v1/approvals", json={**ASK, **changes})
    assert response.status_code in (200, 202), response.text
    body: dict[str, Any] = response.json()
    return body


async def audit_kinds(client: httpx.AsyncClient, approval_id: str) -> list[tuple[str, str]]:
    """(kind, decision) of a request's audit events, oldest first."""
    events = (await client.get("/audit", params={"limit": 500})).json()["items"]
    return [(e["kind"], e["decision"]) for e in events if e["approval_id"] == approval_id]


async def test_a_withdrawn_request_says_so_on_every_card_and_takes_no_answer(
        tmp_path: Path) -> None:
    """DELETE by the key that asked: 200 withdrawn, the Slack and Telegram cards are edited
    "Withdrawn by web:bob", a later approve is 409, the audit log has it; another key
    (not admin) may not withdraw it."""
    async with FakeSlack() as slack_api, FakeTelegramApi() as telegram_api:
        slack = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                              signing_secret=SECRET, api_url=slack_api.api_url)
        telegram = TelegramSurface(bot_token=telegram_api.token, chat_id=CHAT,
                                    base_url=telegram_api.base_url,
                                    base_file_url=telegram_api.base_file_url)
        surfaces = {"slack": slack, "telegram": telegram}
        async with running_node(tmp_path, surfaces=surfaces) as node, \
                node.client(BOB_KEY) as bob, node.client(KEY) as admin:
            mine = (await ask(bob))["id"]
            theirs = (await ask(admin, args={**ASK["args"], "to": "ann@example.com"}))["id"]
            await slack_api.wait_for_calls("chat.postMessage", 2)
            await telegram_api.wait_call("sendMessage", 2)
            refused = await bob.delete(f"/v1/approvals/{theirs}")
            assert refused.status_code == 403, refused.text
            gone = await bob.delete(f"/v1/approvals/{mine}")
            assert gone.status_code == 200, gone.text
            assert gone.json() == {"id": mine, "status": "withdrawn"}
            await slack_api.wait_for_calls("chat.update")
            await telegram_api.wait_call("editMessageText")
            late = await admin.post(f"/approvals/{mine}/approve", json={"scope": "once"})
            again = await bob.delete(f"/v1/approvals/{mine}")
            status = (await admin.get(f"/v1/approvals/{mine}")).json()
            kinds = await audit_kinds(admin, mine)
        await telegram.aclose()
    updated = json.dumps([c.body for c in slack_api.calls_to("chat.update")])
    assert "Withdrawn by web:bob" in updated
    edited = [m.text for m in telegram_api.chat_messages(CHAT) if m.edits]
    assert len(edited) == 1 and "Withdrawn by web:bob" in edited[0]
    assert late.status_code == 409 and again.status_code == 409
    assert status["status"] == "withdrawn" and status["decided_by"] == "web:bob"
    assert kinds == [("evaluation", "ASK_USER"), ("withdrawn", "withdraw")]


async def test_an_admin_may_withdraw_any_outside_request(client: httpx.AsyncClient,
                                                         node: Running) -> None:
    """The admin key withdraws a request another key asked; an unknown id is 404."""
    async with node.client(BOB_KEY) as bob:
        asked = (await ask(bob))["id"]
    gone = await client.delete(f"/v1/approvals/{asked}")
    assert gone.status_code == 200 and gone.json()["status"] == "withdrawn"
    assert (await client.delete("/v1/approvals/a-nope")).status_code == 404


@pytest.fixture
async def base(node: Running) -> AsyncIterator[str]:
    async with serve(node.app) as url:
        yield url


async def test_a_cancelled_sdk_wait_withdraws_its_request(node: Running, base: str) -> None:
    """An agent that stops waiting (its task cancelled) takes its request back: the card
    does not wait for an answer nobody will use."""
    async with Signoff(base, api_key=KEY) as s:
        asking = asyncio.create_task(s.request(tool="send_email", args=ASK["args"],
                                               policy_id="s-1"))
        found: list[str] = []

        async def pending() -> bool:
            async with node.client() as client:
                found[:] = [i["id"] for i in (await client.get("/approvals")).json()["items"]]
            return bool(found)

        await eventually(pending, what="the pending request")
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking

        async def withdrawn() -> bool:
            async with node.client() as client:
                status = (await client.get(f"/v1/approvals/{found[0]}")).json()["status"]
            return bool(status == "withdrawn")

        await eventually(withdrawn, what="the withdrawal")


async def test_a_request_denied_earlier_is_answered_at_once(tmp_path: Path) -> None:
    """Asked again unchanged for the same policy_id after a person's deny: denied at once
    ("denied earlier", no new card); changed content or another policy_id asks again, and
    remember_deny = "0" turns it off."""
    async with running_node(tmp_path) as node, node.client() as client, \
            node.client(BOB_KEY) as bob:
        first = (await ask(bob))["id"]
        denied = await client.post(f"/approvals/{first}/deny", json={"reason": "not now"})
        assert denied.status_code == 200
        again = await ask(bob)
        other_body = await ask(bob, args={**ASK["args"], "body": "changed"})
        other_policy = await ask(bob, policy_id="s-2")
    assert again["status"] == "denied" and again["decision"] == "BLOCK"
    assert "denied earlier by web:admin" in again["reason"] and "not now" in again["reason"]
    assert other_body["status"] == "pending" and other_policy["status"] == "pending"
    settings = make_settings(tmp_path / "off", approvals={"remember_deny": "0"})
    async with running_node(tmp_path / "off", settings=settings) as node, \
            node.client() as client:
        first = (await ask(client))["id"]
        await client.post(f"/approvals/{first}/deny")
        assert (await ask(client))["status"] == "pending"


async def test_a_refusal_is_remembered_however_often_the_agent_retries(
        tmp_path: Path) -> None:
    """An agent that retries a denied request in a loop keeps getting "denied earlier":
    its own automatic refusals do not push the person's deny out of memory (only the
    newest 50 denied requests were looked at, so the 51st retry got a fresh card)."""
    async with running_node(tmp_path) as node, node.client() as client, \
            node.client(BOB_KEY) as bob:
        first = (await ask(bob))["id"]
        await client.post(f"/approvals/{first}/deny", json={"reason": "no"})
        answers = [await ask(bob) for _ in range(55)]
    assert [a["status"] for a in answers] == ["denied"] * 55
    assert all(f"({first})" in a["reason"] for a in answers)


async def test_an_approval_by_one_person_counts_one(client: httpx.AsyncClient,
                                                   node: Running) -> None:
    """A request approved by one person (no quorum) says "approvals": 1, not 0."""
    async with node.client(BOB_KEY) as bob:
        asked = (await ask(bob))["id"]
    approved = await client.post(f"/approvals/{asked}/approve", json={"scope": "once"})
    assert approved.json()["approvals"] == 1
    assert (await client.get(f"/v1/approvals/{asked}")).json()["approvals"] == 1


async def test_an_approval_without_a_report_does_not_read_as_done(
        client: httpx.AsyncClient, node: Running) -> None:
    """Approved is consent, not a done deed: until the caller reports, the request says
    the outcome was not reported; then it says what was reported."""
    async with node.client(BOB_KEY) as bob:
        asked = (await ask(bob))["id"]
    await client.post(f"/approvals/{asked}/approve", json={"scope": "once"})
    before = (await client.get(f"/v1/approvals/{asked}")).json()
    assert before["reported"] == "outcome not reported by the caller"
    await client.post(f"/v1/approvals/{asked}/outcome", json={"ok": False, "detail": "550"})
    after = (await client.get(f"/v1/approvals/{asked}")).json()
    assert after["reported"] == "caller reported failure: 550"


async def test_withdrawing_a_shared_card_leaves_the_identical_request_asking(
        client: httpx.AsyncClient, node: Running) -> None:
    """Two identical requests share a card; the first asker withdraws: the other one is
    still pending, on a card of its own, and can be approved."""
    async with node.client(KEY) as admin:
        first = (await ask(admin))["id"]
    async with node.client(BOB_KEY) as bob:
        second = (await ask(bob, policy_id="s-2"))["id"]
    joined = (await client.get("/approvals")).json()["items"]
    assert [i["coalesced_into"] for i in joined] == [None, first]
    assert (await client.delete(f"/v1/approvals/{first}")).status_code == 200
    listed = (await client.get("/approvals")).json()["items"]
    assert [(i["id"], i["coalesced_into"]) for i in listed] == [(second, None)]
    approved = await client.post(f"/approvals/{second}/approve", json={"scope": "once"})
    assert approved.status_code == 200 and approved.json()["status"] == "approved"


async def test_a_script_withdraws_with_the_sync_client(node: Running, base: str) -> None:
    """SignoffSync.withdraw takes back a request it asked without waiting; a second
    withdraw says it could not (already withdrawn)."""
    def script() -> tuple[str | None, bool, bool]:
        with SignoffSync(base, api_key=KEY) as s:
            d = s.request(tool="send_email", args=ASK["args"], policy_id="s-9", wait=False)
            assert d.id is not None and d.pending
            return d.id, s.withdraw(d.id), s.withdraw(d.id)

    approval_id, first, again = await asyncio.to_thread(script)
    assert first and not again
    async with node.client() as client:
        status = (await client.get(f"/v1/approvals/{approval_id}")).json()["status"]
    assert status == "withdrawn"
