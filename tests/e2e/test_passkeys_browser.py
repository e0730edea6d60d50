"""Passkey step-up in a real browser: Chromium's virtual authenticator (WebAuthn over the
DevTools protocol), a real node served by uvicorn, py_webauthn checking on the server.

A person registers a passkey on the console's Passkeys page and approves a SEND request
under ``step_up_with = "passkey"`` from its card; assertions made in the page with
``navigator.credentials.get`` are then sent over the API to show every refusal: none,
a replay, one made for another request or decision, one without user verification, and
one from a revoked passkey. ``audit --verify`` re-checks the stored assertion.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.bot.ports import Actor, DecisionEvent
from signoff.runtime import audit as chain
from signoff.runtime.models import AuditEvent, DecisionCode, Scope
from tests.api.helpers import KEY, make_settings, state_beside, wait_state, webhook_steps
from tests.e2e.phone import Phone, fits, phone_console, snapshot
from tests.fakes.http_echo import HttpEcho

pytestmark = pytest.mark.browser

GET = """async (options) => {
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options);
  const made = await navigator.credentials.get({publicKey});
  return made.toJSON();
}"""


@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    async with HttpEcho() as server:
        yield server


async def asked(phone: Phone, echo: HttpEcho, goal: str) -> str:
    """Submit a task with one SEND step; the id of the request it waits on."""
    submitted = await phone.api.post("/tasks", json={"goal": goal,
                                                     "steps": webhook_steps(echo.url("/hook"),
                                                                           {"goal": goal})})
    task = await wait_state(phone.api, submitted.json()["id"], "waiting_approval")
    return str(task["approval"]["id"])


async def assertion(phone: Phone, approval_id: str, decision: str,
                    **tweak: str) -> dict[str, Any]:
    """An assertion the page's authenticator makes for options of this request/decision
    (``tweak``: what a hostile client changes in the options before signing)."""
    options = await phone.api.get(f"/approvals/{approval_id}/passkey-options",
                                  params={"decision": decision})
    assert options.status_code == 200, options.text
    made: dict[str, Any] = await phone.page.evaluate(GET, options.json() | tweak)
    return made


async def authenticator(phone: Phone) -> tuple[Any, str]:
    """Chromium's virtual platform authenticator (user verification on), and its id."""
    cdp = await phone.context.new_cdp_session(phone.page)
    await cdp.send("WebAuthn.enable")
    added = await cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
        "hasUserVerification": True, "isUserVerified": True,
        "automaticPresenceSimulation": True}})
    return cdp, str(added["authenticatorId"])


def settings_for(work: Path) -> Any:
    return make_settings(work, approvals={"step_up": ["SEND"], "step_up_with": "passkey",
                                          "approvers": ["slack:U1", "email:ops@example.com"]})


async def refused(api: httpx.AsyncClient, approval_id: str, body: dict[str, Any],
                  route: str = "approve") -> str:
    """POST a decision that must be a 403 of the passkey step-up; its detail."""
    answer = await api.post(f"/approvals/{approval_id}/{route}", json=body)
    assert answer.status_code == 403, answer.text
    assert answer.json()["step_up"] == "passkey"
    return str(answer.json()["detail"])


async def register_in_console(phone: Phone, base: str) -> None:
    """Register a passkey named "laptop" on the Passkeys page."""
    page = phone.page
    await page.goto(f"{base}/console/passkeys")
    await page.fill("#passkey-name", "laptop")
    await page.get_by_role("button", name="Register a passkey").click()
    await page.locator(".passkey-list .name", has_text="laptop").wait_for(timeout=10_000)
    await fits(page)
    await snapshot(page, "console-passkeys.png")


async def test_passkey_step_up_in_chromium(tmp_path: Path, echo: HttpEcho) -> None:
    """Register a passkey in the console, approve from the card with it; without one, with
    a replayed one, one for another request or decision, without user verification, or
    after revoking it, nothing is decided; the audit keeps and re-verifies the assertion."""
    async with phone_console(tmp_path, settings=settings_for(tmp_path)) as phone:
        # The relying party is localhost (no public_url): use the console by that name.
        base = phone.base.replace("127.0.0.1", "localhost")
        await phone.page.goto(f"{base}/?key={KEY}")
        cdp, auth_id = await authenticator(phone)
        first = await asked(phone, echo, "first")

        # No passkey yet: no options, and the answer says how to register one.
        none = await phone.api.get(f"/approvals/{first}/passkey-options?decision=once")
        assert none.status_code == 403 and none.json()["register"] == "/console/passkeys"
        detail = await refused(phone.api, first, {})
        assert "register one" in detail and "/console/passkeys" in detail

        await register_in_console(phone, base)
        listed = (await phone.api.get("/passkeys")).json()["items"]
        assert [(p["name"], p["owner"], p["revoked_at"]) for p in listed] == [
            ("laptop", "web:admin", None)]

        # Every path without an assertion is refused; chats are sent to the console.
        assert "needs a passkey" in await refused(phone.api, first, {"scope": "once"})
        assert "needs a passkey" in await refused(phone.api, first, {}, route="deny")
        task_id = (await phone.api.get("/approvals")).json()["items"][0]["task_id"]
        on_task = await phone.api.post(f"/tasks/{task_id}/approve", json={})
        assert on_task.status_code == 403 and on_task.json()["step_up"] == "passkey"
        batch = await phone.api.post("/approvals/batch", json={"ids": [first],
                                                               "decision": "once"})
        assert batch.json()["results"][0]["status"] == 403
        flow = phone.node.node.flow
        for actor in (Actor("slack", "U1"), Actor("email", "ops@example.com")):
            chat = await flow.on_decision(DecisionEvent(
                approval_id=first, scope=Scope.ONCE, actor=actor, surface=actor.platform))
            assert not chat.accepted and chat.code is DecisionCode.STEP_UP
            assert chat.message.startswith("Confirm in the console")
        terminal = await flow.on_decision(DecisionEvent(
            approval_id=first, scope=Scope.ONCE, actor=Actor("terminal", "me"),
            surface="terminal"))
        assert not terminal.accepted and terminal.code is DecisionCode.PASSKEY

        # An assertion made for another decision, or for another request, is refused.
        for_deny = await assertion(phone, first, "deny")
        assert "made for 'deny'" in await refused(phone.api, first, {"passkey": for_deny})
        second = await asked(phone, echo, "second")
        for_other = await assertion(phone, second, "once")
        assert "another request" in await refused(phone.api, first, {"passkey": for_other})

        # Without user verification: the browser will not sign options that require it,
        # and a client that drops the requirement gets an assertion the server refuses.
        await cdp.send("WebAuthn.setUserVerified", {"authenticatorId": auth_id,
                                                     "isUserVerified": False})
        with pytest.raises(Exception, match="NotAllowedError"):
            await assertion(phone, first, "once")
        unverified = await assertion(phone, first, "once", userVerification="discouraged")
        assert "not verified" in await refused(phone.api, first, {"passkey": unverified})
        await cdp.send("WebAuthn.setUserVerified", {"authenticatorId": auth_id,
                                                     "isUserVerified": True})

        # The card page: press Once, the device signs, the request is approved.
        await phone.page.goto(f"{base}/console/cards/{first}")
        card = phone.page.locator(f"#card-{first}")
        assert "confirm with your passkey" in await card.locator(".passkey-note").inner_text()
        await fits(phone.page)
        await snapshot(phone.page, "console-passkey-prompt.png")
        # The card's form without its script (a plain POST) decides nothing either.
        csrf = await card.locator("input[name=csrf]").first.get_attribute("value")
        plain = await phone.page.request.post(f"{base}/console/decide", form={
            "approval_id": first, "scope": "once", "csrf": csrf or "", "next": "/"},
            max_redirects=0)
        assert plain.status == 303
        assert (await phone.api.get(f"/v1/approvals/{first}")).json()["status"] == "pending"
        await card.get_by_role("button", name="Once").click()
        await phone.page.locator(f"#card-{first}.status-approved").wait_for(timeout=15_000)
        await wait_state(phone.api, task_id, "completed")

        # A valid assertion over the API approves; the same one again is a replay. (An
        # assertion older than the last one accepted is stale: the authenticator's
        # counter must grow, so this one is made now.)
        for_second = await assertion(phone, second, "once")
        approved = await phone.api.post(f"/approvals/{second}/approve",
                                        json={"scope": "once", "passkey": for_second})
        assert approved.status_code == 200, approved.text
        assert "used already" in await refused(phone.api, second, {"passkey": for_second})

        # After revoking the passkey, an assertion it made is refused.
        third = await asked(phone, echo, "third")
        for_third = await assertion(phone, third, "once")
        gone = await phone.api.delete(f"/passkeys/{listed[0]['id']}")
        assert gone.status_code == 200 and gone.json()["revoked_at"]
        assert "revoked" in await refused(phone.api, third, {"passkey": for_third})

        events = (await phone.api.get("/audit", params={"limit": 500})).json()["items"]
        signed = [e for e in events if e["kind"] == "decision" and e["passkey"]]
        assert {e["approval_id"] for e in signed} == {first, second}
        kept = signed[0]["passkey"]
        assert kept["credential_id"] == listed[0]["credential_id"] and kept["signature"]
        assert (await chain.verify(phone.node.node.store)).ok  # revoked: still verifies
    await tampered_assertion_fails(tmp_path)


async def tampered_assertion_fails(work: Path) -> None:
    """An assertion altered in the database — even with the chain re-sealed and re-signed
    around it by someone holding the node's key — fails ``audit --verify``."""
    from signoff.cli.audit import run_audit
    from signoff.runtime.passkeys import assertion_check
    from signoff.runtime.signing import held_key
    from signoff.runtime.store.sqlite.store import SqliteTaskStore

    database = state_beside(work) / "signoff.db"
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT id, data FROM audit ORDER BY id").fetchall()
        events = [AuditEvent.model_validate_json(data) for _, data in rows]
        target = next(e for e in events if e.passkey)
        assert target.passkey is not None
        signature = bytearray(target.passkey["signature"].encode())
        signature[10] = ord("A") if signature[10] != ord("A") else ord("B")
        target.passkey = {**target.passkey, "signature": signature.decode()}
        prev = chain.GENESIS
        signer = held_key(state_beside(work), node_id="test-node")
        for event in events:  # re-seal and re-sign: only the passkey check can notice now
            sealed = chain.seal(event, event_id=event.id, prev_hash=prev, signer=signer)
            db.execute("UPDATE audit SET data = ? WHERE id = ?",
                       (sealed.model_dump_json(), sealed.id))
            prev = sealed.hash
        db.execute("UPDATE audit_head SET hash = ?", (prev,))
    store = SqliteTaskStore(url=f"sqlite:///{database}")
    await store.open()
    try:
        result = await chain.verify(store, check=assertion_check(store))
    finally:
        await store.close()
    assert not result.ok and result.bad_event == target.id
    assert "passkey assertion fails: its signature does not verify" in (result.problem or "")
    settings = settings_for(work)
    code = await run_audit(settings, task=None, verify=True, head=False, expect_head=None,
                           as_json=False, work_dir=None, database=None)
    assert code == 1
