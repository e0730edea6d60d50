"""The web console in a real browser on a phone-sized screen (Playwright + Debian chromium).

A real node and uvicorn server; the task is submitted through the API and the person
works only in the browser: sign in with the key, see the SEND request appear without a
reload, press Session, watch the card turn into the outcome and the task complete.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.api.helpers import KEY, wait_state, webhook_steps
from tests.e2e.phone import fits, phone_console, snapshot
from tests.fakes.http_echo import HttpEcho

pytestmark = pytest.mark.browser

@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    async with HttpEcho() as server:
        yield server


async def test_approve_from_a_phone_sized_console(tmp_path: Path, echo: HttpEcho) -> None:
    """Log in, see a pending SEND card arrive live, press Session, see outcome and completion."""
    hook = echo.url("/hook")

    async with phone_console(tmp_path) as phone:
        base, api, context, page = phone.base, phone.api, phone.context, phone.page
        # Sign in once with the key; the cookie is HttpOnly and SameSite=Strict.
        await page.goto(f"{base}/?key={KEY}")
        assert page.url == f"{base}/"
        cookie = next(c for c in await context.cookies() if c["name"] == "signoff_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert KEY not in cookie["value"]
        await page.locator("body.connected").wait_for(timeout=10_000)  # /events is open

        reloads: list[str] = []
        page.on("framenavigated",
                lambda frame: reloads.append(frame.url) if frame == page.main_frame else None)

        # A task with one SEND step arrives through the API...
        submitted = await api.post("/tasks", json={"goal": "tell the team the build is green",
                                                   "steps": webhook_steps(hook)})
        task = await wait_state(api, submitted.json()["id"], "waiting_approval")
        approval_id = task["approval"]["id"]

        # ...and its card appears without a reload.
        card = page.locator(f"#card-{approval_id}")
        await card.wait_for(timeout=10_000)
        assert reloads == [], "the card must appear live, not by reloading"
        assert await card.locator(".risk").inner_text() == "SEND"
        assert hook in await card.locator(".targets").inner_text()
        assert await card.locator(".decide button").all_inner_texts() == [
            "Once", "Session", "Always", "Deny"]
        assert "expires in" in await card.locator(".expires").inner_text()
        await fits(page)
        await snapshot(page, "console-pending.png")

        await card.get_by_role("button", name="Session").click()

        decided = page.locator(f"#card-{approval_id}.status-approved")
        await decided.wait_for(timeout=10_000)
        outcome = await decided.locator(".outcome").inner_text()
        assert outcome.startswith("Approved for this session by web:admin")
        assert await page.locator(f"#card-{approval_id} button").count() == 0
        await page.locator(f"#card-{approval_id} .task-state.state-completed").wait_for(
            timeout=15_000)

        done = (await api.get(f"/tasks/{task['id']}")).json()
        assert done["state"] == "completed"
        assert done["actions"][0]["decided_by"] == "web:admin"
        assert done["actions"][0]["decision"] == "approved:session"
        assert sum(1 for r in echo.requests if r.path == "/hook") == 1

        await snapshot(page, "console.png")


async def test_hold_countdown_and_undo_on_a_phone(tmp_path: Path, echo: HttpEcho) -> None:
    """With approvals.hold SEND = 30s, Once turns the card into a held one: a countdown
    that ticks down and one Undo button; Undo denies ("undone by web:admin") and nothing
    is sent."""
    from tests.api.helpers import make_settings

    settings = make_settings(tmp_path, approvals={"hold": {"SEND": "30s"}})

    async with phone_console(tmp_path, settings=settings) as phone:
        base, api, page = phone.base, phone.api, phone.page
        await page.goto(f"{base}/?key={KEY}")
        await page.locator("body.connected").wait_for(timeout=10_000)
        submitted = await api.post("/tasks", json={"goal": "tell the team",
                                                   "steps": webhook_steps(echo.url("/hook"))})
        task = await wait_state(api, submitted.json()["id"], "waiting_approval")
        approval_id = task["approval"]["id"]
        card = page.locator(f"#card-{approval_id}")
        await card.wait_for(timeout=10_000)
        await card.get_by_role("button", name="Once").click()

        held = page.locator(f"#card-{approval_id}.status-held")
        await held.wait_for(timeout=10_000)
        assert await held.locator("button").all_inner_texts() == ["Undo"]
        assert "unless undone" in await held.locator(".outcome").inner_text()
        first = await held.locator(".hold").inner_text()
        assert first.startswith("runs in ")
        # console.js counts down every second, without a reload.
        await page.wait_for_function(
            "t => document.querySelector('.hold') && "
            "document.querySelector('.hold').textContent !== t", arg=first,
            timeout=10_000)
        await fits(page)
        await snapshot(page, "console-held.png")

        await held.get_by_role("button", name="Undo").click()
        denied = page.locator(f"#card-{approval_id}.status-denied")
        await denied.wait_for(timeout=10_000)
        assert "undone by web:admin" in await denied.locator(".outcome").inner_text()
        await wait_state(api, task["id"], "failed")
        assert sum(1 for r in echo.requests if r.path == "/hook") == 0
