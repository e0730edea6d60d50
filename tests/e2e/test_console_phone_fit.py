"""The console on a 375×812 phone, measured in a real browser: the first card's decision
buttons are on screen without scrolling, every tap target is at least 44 px, the task
page wraps a long result instead of scrolling sideways, and "done" and "already decided"
look different. Screenshots go to test-artifacts/."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import TimeoutError as PlaywrightTimeout

from tests.api.helpers import KEY, wait_state, webhook_steps
from tests.e2e.phone import HEIGHT, fits, phone_console, snapshot
from tests.fakes.http_echo import HttpEcho

pytestmark = pytest.mark.browser

TAP = 44  # px: the smallest tap target people hit reliably (WCAG 2.5.5, Apple's HIG)
TARGETS = "button, a[href], input:not([type=hidden]), select, textarea, summary"


@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    async with HttpEcho() as server:
        yield server


async def small_targets(page: object) -> list[str]:
    """Visible tap targets smaller than TAP px either way, described."""
    return await page.evaluate(  # type: ignore[attr-defined, no-any-return]
        """([sel, tap]) => [...document.querySelectorAll(sel)].filter(el => {
               // A box inside its label is tapped through the label.
               const r = (el.closest('label') || el).getBoundingClientRect();
               return r.width > 0 && r.height > 0 && (r.width < tap || r.height < tap);
             }).map(el => `${el.tagName} '${el.textContent.trim().slice(0, 30)}' `
                          + `${Math.round(el.getBoundingClientRect().width)}x`
                          + `${Math.round(el.getBoundingClientRect().height)}`)""",
        [TARGETS, TAP])


async def test_the_console_fits_a_phone(tmp_path: Path, echo: HttpEcho) -> None:
    """Buttons above the fold, big tap targets, a wrapped result, distinct flashes."""
    async with phone_console(tmp_path) as phone:
        page, api, base = phone.page, phone.api, phone.base
        await page.goto(f"{base}/?key={KEY}")
        long_goal = "tell the team the build is green " + "and " * 40 + "done"
        tasks = []
        for n in (1, 2):  # two different requests (identical ones could be coalesced)
            steps = webhook_steps(echo.url("/hook"), {"n": n})
            sent = await api.post("/tasks", json={"goal": long_goal, "steps": steps})
            tasks.append(await wait_state(api, sent.json()["id"], "waiting_approval"))
        await page.goto(f"{base}/")
        first = page.locator(".card").first
        await first.wait_for(timeout=10_000)
        await snapshot(page, "phone-pending.png")
        shown = await first.get_attribute("data-approval")
        [approved] = [t for t in tasks if t["approval"]["id"] == shown]
        [other] = [t for t in tasks if t is not approved]
        for button in await first.locator(".decide button").all():
            box = await button.bounding_box()
            assert box is not None and box["y"] + box["height"] <= HEIGHT, box
        assert await small_targets(page) == []
        await fits(page)

        # "done": a decision taken here.
        await first.get_by_role("button", name="Once").click()
        done = page.locator(".flash")
        await done.wait_for(timeout=10_000)
        done_class = await done.get_attribute("class")
        done_text = await done.inner_text()
        await snapshot(page, "phone-flash-done.png")

        # "already decided": a stale page's button for a request decided meanwhile. The
        # page is kept stale (as a phone's tab is when its stream dropped): with the live
        # stream it would swap the buttons out before the click, and the click would wait.
        await page.route("**/events", lambda route: route.abort())
        await page.goto(f"{base}/console/cards/{other['approval']['id']}")
        await page.locator(".decide button").first.wait_for(timeout=10_000)
        r = await api.post(f"/tasks/{other['id']}/deny", json={"reason": "no"})
        assert r.status_code == 200, r.text
        await page.get_by_role("button", name="Once").click()
        late = page.locator(".flash")
        await late.wait_for(timeout=10_000)
        late_class = await late.get_attribute("class")
        await snapshot(page, "phone-flash-already.png")
        assert done_class != late_class, (done_class, done_text, await late.inner_text())
        await page.unroute("**/events")

        # The task page wraps its (long) result.
        final = await wait_state(api, approved["id"], "completed", "failed")
        assert final["state"] == "completed", final
        await page.goto(f"{base}/console/tasks/{approved['id']}")
        result = page.locator("pre.result").first
        await result.wait_for(timeout=10_000)
        # Waited for, not read once: on a loaded machine the first read came before the
        # page's layout settled (one faketime CI run in many). The element is looked up on
        # every try, not held: the live page may swap it for a fresh one, and a held
        # (detached) element has no computed style, so the wait could never succeed.
        wrapping = ("() => { const el = document.querySelector('pre.result'); "
                    "return el !== null && el.isConnected "
                    "&& getComputedStyle(el).whiteSpace === 'pre-wrap' "
                    "&& el.scrollWidth <= el.clientWidth; }")
        try:
            await page.wait_for_function(wrapping, timeout=10_000)
        except PlaywrightTimeout:
            seen = await result.evaluate(
                "el => [getComputedStyle(el).whiteSpace, el.scrollWidth, el.clientWidth]")
            raise AssertionError(f"the result must wrap, not scroll sideways: {seen}") from None
        await fits(page)
        assert await small_targets(page) == []
        await snapshot(page, "phone-task.png")
