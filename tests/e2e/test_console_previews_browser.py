"""The console's previews and the Always confirmation in a real browser at 375×812
(Playwright + Debian chromium): the diff of a write_file reads as a diff without making
the page scroll sideways, and Always asks once more — with JavaScript and without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.helpers import KEY, make_settings, wait_state
from tests.e2e.phone import fits, phone_console, snapshot

pytestmark = pytest.mark.browser

LONG = "x = '" + "a very long line that a phone cannot show in one row " * 4 + "'\n"


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"])
async def test_diff_preview_and_always_confirmation_on_a_phone(tmp_path: Path,
                                                               javascript: bool) -> None:
    """See the diff on the card, press Always, read what it means, confirm: the task runs
    once, with an always grant; the page never scrolls sideways."""
    settings = make_settings(tmp_path, approvals={"autonomous_risks": ["READ"]})
    (tmp_path / "app.py").write_text("import os\nprint('old')\n")

    async with phone_console(tmp_path, settings=settings, javascript=javascript) as phone:
        base, api, page = phone.base, phone.api, phone.page
        submitted = await api.post("/tasks", json={"goal": "update app.py", "steps": [
            {"tool": "write_file", "args": {"path": "app.py",
                                            "content": f"import os\nprint('new')\n{LONG}"}}]})
        task = await wait_state(api, submitted.json()["id"], "waiting_approval")
        approval_id = task["approval"]["id"]
        await page.goto(f"{base}/?key={KEY}")
        card = page.locator(f"#card-{approval_id}")
        await card.wait_for(timeout=10_000)

        preview = card.locator(".preview")
        assert await preview.locator("h3").inner_text() == "Changes to app.py"
        assert await preview.locator(".d-del").all_inner_texts() == ["-print('old')"]
        added = await preview.locator(".d-add").all_inner_texts()
        assert added[0] == "+print('new')" and added[1] == "+" + LONG.rstrip("\n")
        assert await preview.locator("pre").is_visible()
        help_text = await card.locator(".scope-help").inner_text()
        assert "from now on" in help_text and "this one time" in help_text
        await fits(page)
        suffix = "js" if javascript else "nojs"
        await snapshot(page, f"console-diff-{suffix}.png")

        await card.get_by_role("button", name="Always").click()
        await page.get_by_role("heading", name="Approve always?").wait_for(timeout=10_000)
        confirm = page.locator(".confirm-always")
        assert "from now on" in await confirm.inner_text()
        assert await confirm.locator(".preview h3").inner_text() == "Changes to app.py"
        await snapshot(page, f"console-always-{suffix}.png")
        assert (await api.get(f"/tasks/{task['id']}")).json()["state"] == \
            "waiting_approval", "the first press decides nothing"

        await confirm.get_by_role("button", name="Yes, approve always").click()
        done = await wait_state(api, task["id"], "completed")
        assert done["actions"][0]["decision"] == "approved:always"
        assert "print('new')" in (tmp_path / "app.py").read_text()
        grants = (await api.get("/grants")).json()["items"]
        assert [g["scope"] for g in grants] == ["always"]
