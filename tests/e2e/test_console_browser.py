"""The web console in a real browser on a phone-sized screen (Playwright + Debian chromium).

A real node and uvicorn server; the task is submitted through the API and the person
works only in the browser: sign in with the key, see the SEND request appear without a
reload, press Session, watch the card turn into the outcome and the task complete.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.api.helpers import KEY, running_node, serve, wait_state, webhook_steps
from tests.fakes.http_echo import HttpEcho

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WIDTH, HEIGHT = 375, 812  # a phone


def need_browser() -> None:
    """Skip (visibly) without chromium, unless SIGNOFF_REQUIRE_BROWSER=1 makes it a failure."""
    missing = None
    if not CHROMIUM.exists():
        missing = f"{CHROMIUM} is not installed (apt-get install chromium)"
    else:
        try:
            import playwright.async_api  # noqa: F401
        except ImportError:
            missing = "the playwright package is not installed (pip install -e '.[dev]')"
    if missing is None:
        return
    if os.environ.get("SIGNOFF_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test required but {missing}")
    pytest.skip(f"browser test skipped: {missing}; set SIGNOFF_REQUIRE_BROWSER=1 to fail instead")


@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    async with HttpEcho() as server:
        yield server


async def test_approve_from_a_phone_sized_console(tmp_path: Path, echo: HttpEcho) -> None:
    """Log in, see a pending SEND card arrive live, press Session, see outcome and completion."""
    need_browser()
    from playwright.async_api import async_playwright

    hook = echo.url("/hook")
    async with running_node(tmp_path) as node, serve(node.app) as base, \
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {KEY}"},
                              timeout=10) as api, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": WIDTH, "height": HEIGHT},
                                                device_scale_factor=2)
            page = await context.new_page()

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
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= WIDTH, f"the page scrolls sideways at {WIDTH} px ({width})"
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "console-pending.png"), full_page=True)

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

            await page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)
        finally:
            await browser.close()


async def test_hold_countdown_and_undo_on_a_phone(tmp_path: Path, echo: HttpEcho) -> None:
    """With approvals.hold SEND = 30s, Once turns the card into a held one: a countdown
    that ticks down and one Undo button; Undo denies ("undone by web:admin") and nothing
    is sent."""
    need_browser()
    from playwright.async_api import async_playwright

    from tests.api.helpers import make_settings

    settings = make_settings(tmp_path, approvals={"hold": {"SEND": "30s"}})
    async with running_node(tmp_path, settings=settings) as node, serve(node.app) as base, \
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {KEY}"},
                              timeout=10) as api, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": WIDTH, "height": HEIGHT},
                                                device_scale_factor=2)
            page = await context.new_page()
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
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= WIDTH, f"the page scrolls sideways at {WIDTH} px ({width})"
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "console-held.png"), full_page=True)

            await held.get_by_role("button", name="Undo").click()
            denied = page.locator(f"#card-{approval_id}.status-denied")
            await denied.wait_for(timeout=10_000)
            assert "undone by web:admin" in await denied.locator(".outcome").inner_text()
            await wait_state(api, task["id"], "failed")
            assert sum(1 for r in echo.requests if r.path == "/hook") == 0
        finally:
            await browser.close()
