"""The console's multi-select in a real browser on a phone-sized screen: tick several
cards, approve them once together (or deny them), the rest stay pending."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.helpers import BOB_KEY, KEY
from tests.e2e.phone import fits, phone_console, snapshot

pytestmark = pytest.mark.browser


def ask(to: str) -> dict[str, object]:
    return {"tool": "send_email", "args": {"to": to, "subject": "hi", "body": "x"},
            "requester": "hermes:alice", "policy_id": "s-1"}


async def test_select_several_cards_and_approve_them_once(tmp_path: Path) -> None:
    """Tick two of four cards, press "Approve selected once": those two are approved once
    by web:admin, the others still wait; tick both of those and "Deny selected" denies
    them; a lone card has no box to tick (its own buttons do)."""
    async with phone_console(tmp_path) as phone:
        base, api, page = phone.base, phone.api, phone.page
        # The agent asks with its own key: the admin deciding in the console never
        # approves a request it asked itself.
        agent = phone.node.client(BOB_KEY)
        ids = []
        for to in ("a@example.com", "b@example.com", "c@example.com", "d@example.com"):
            answer = await agent.post("/v1/approvals", json=ask(to))
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        await page.goto(f"{base}/?key={KEY}")
        for approval_id in ids:
            await page.locator(f"#card-{approval_id}").wait_for(timeout=10_000)
        await page.locator(f"#card-{ids[0]} input[name=ids]").check()
        await page.locator(f"#card-{ids[2]} input[name=ids]").check()
        await fits(page)
        await snapshot(page, "console-multiselect.png")

        await page.get_by_role("button", name="Approve selected once").click()
        await page.locator(".flash").wait_for(timeout=10_000)
        assert "2 of 2 requests approved once" in await page.locator(".flash").inner_text()
        states = [(await api.get(f"/v1/approvals/{i}")).json() for i in ids]
        assert [(s["status"], s["scope"], s["decided_by"]) for s in states] == [
            ("approved", "once", "web:admin"), ("pending", None, None),
            ("approved", "once", "web:admin"), ("pending", None, None)]
        assert await page.locator(f"#card-{ids[1]}.status-pending").count() == 1

        await page.locator(f"#card-{ids[1]} input[name=ids]").check()
        await page.locator(f"#card-{ids[3]} input[name=ids]").check()
        await page.get_by_role("button", name="Deny selected").click()
        await page.locator(".flash", has_text="2 of 2 requests denied").wait_for(
            timeout=10_000)
        for approval_id in (ids[1], ids[3]):
            status = (await api.get(f"/v1/approvals/{approval_id}")).json()["status"]
            assert status == "denied"
        assert await page.locator("input[name=ids]").count() == 0  # nothing left to tick

        another = await agent.post("/v1/approvals", json=ask("e@example.com"))
        lone = page.locator(f"#card-{another.json()['id']}")
        await lone.wait_for(timeout=10_000)
        assert await lone.locator("input[name=ids]").count() == 0
        assert await page.get_by_role("button", name="Approve selected once").count() == 0
