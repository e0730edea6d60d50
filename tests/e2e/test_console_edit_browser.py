"""Edit before approve and a time-boxed answer in the console, in a real browser on a
phone-sized screen: the page a chat's step-up link opens, its edit form, its "for" choice."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.api.helpers import KEY, wait_state, webhook_steps
from tests.e2e.phone import fits, phone_console, snapshot
from tests.e2e.test_console_browser import echo  # noqa: F401  (the fixture)
from tests.fakes.http_echo import HttpEcho

pytestmark = pytest.mark.browser


async def test_edit_the_args_then_approve_on_the_cards_own_page(tmp_path: Path,
                                                                echo: HttpEcho) -> None:  # noqa: F811
    """On /console/cards/{id} at 375×812: open the edit form, change the webhook's URL and
    payload, press Once (edited): the edited call is the one made; then a second card
    answered Session "for 30 minutes" makes a grant that lapses 30 minutes later."""
    async with phone_console(tmp_path) as phone:
        base, api, page = phone.base, phone.api, phone.page
        await page.goto(f"{base}/?key={KEY}")

        submitted = await api.post("/tasks", json={
            "goal": "tell the team", "steps": webhook_steps(echo.url("/hook"))})
        task = await wait_state(api, submitted.json()["id"], "waiting_approval")
        approval_id = task["approval"]["id"]

        await page.goto(f"{base}/console/cards/{approval_id}")  # where a chat link lands
        card = page.locator(f"#card-{approval_id}")
        await card.wait_for(timeout=10_000)
        await card.locator("details.edit summary").click()
        area = card.locator("textarea[name=args]")
        asked = json.loads(await area.input_value())
        assert asked == {"url": echo.url("/hook"), "payload": {"n": 1}}
        await area.fill(json.dumps({"url": echo.url("/status/200"), "payload": {"n": 2}}))
        await fits(page)
        await snapshot(page, "console-edit.png")

        await card.get_by_role("button", name="Once (edited)").click()
        await page.locator(f"#card-{approval_id}.status-approved").wait_for(timeout=10_000)
        assert page.url == f"{base}/console/cards/{approval_id}"
        assert "(edited)" in await page.locator(".flash").inner_text()
        done = await wait_state(api, task["id"], "completed")
        assert done["actions"][0]["args"]["url"] == echo.url("/status/200")
        assert [r.path for r in echo.requests] == ["/status/200"]
        audit = (await api.get("/audit", params={"task": task["id"]})).json()["items"]
        [decision] = [ev for ev in audit if ev["kind"] == "decision"]
        assert decision["original_fingerprint"] not in (None, decision["fingerprint"])

        second = await api.post("/tasks", json={
            "goal": "tell the team again", "steps": webhook_steps(echo.url("/hook"))})
        task2 = await wait_state(api, second.json()["id"], "waiting_approval")
        await page.goto(f"{base}/console/cards/{task2['approval']['id']}")
        card2 = page.locator(f"#card-{task2['approval']['id']}")
        await card2.locator("select[name=for]").select_option("30m")
        await card2.locator(".decide").get_by_role("button", name="Session").click()
        await wait_state(api, task2["id"], "completed")
        grants = (await api.get("/grants")).json()["items"]
        [grant] = [g for g in grants if g["scope"] == "session"]
        decided = (await api.get(f"/v1/approvals/{task2['approval']['id']}")).json()
        lasted = (datetime.fromisoformat(grant["expires_at"])
                  - datetime.fromisoformat(decided["decided_at"]))
        assert lasted == timedelta(minutes=30)
