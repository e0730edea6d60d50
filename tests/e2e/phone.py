"""The console in a real browser on a phone-sized screen, for the browser tests: Debian's
chromium through Playwright, a real node served by uvicorn, an API client with the key.

``phone_console`` is the one place that starts it all (and skips or fails visibly when
chromium is missing); ``fits`` and ``snapshot`` are what every phone test checks and keeps.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import httpx
import pytest

from signoff.bot.ports import Surface
from signoff.config.settings import Settings
from tests.api.helpers import KEY, Running, running_node, serve

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page

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


class Phone(NamedTuple):
    """A running node, its URL, an API client with the key, and the phone's browser page."""

    node: Running
    base: str
    api: httpx.AsyncClient
    context: BrowserContext
    page: Page


@asynccontextmanager
async def phone_console(tmp_path: Path, *, settings: Settings | None = None,
                        javascript: bool = True, surfaces: Mapping[str, Surface] | None = None,
                        sock: socket.socket | None = None) -> AsyncIterator[Phone]:
    """A node (``settings`` or the test defaults, with ``surfaces`` beside the console)
    served on ``sock`` (default: a free port), and a 375×812 browser page, not signed in."""
    need_browser()
    from playwright.async_api import async_playwright

    async with running_node(tmp_path, settings=settings, surfaces=surfaces) as node, \
            serve(node.app, sock) as base, \
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {KEY}"},
                              timeout=10) as api, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": WIDTH, "height": HEIGHT},
                                                device_scale_factor=2,
                                                java_script_enabled=javascript)
            yield Phone(node, base, api, context, await context.new_page())
        finally:
            await browser.close()


async def fits(page: Page) -> None:
    """The page never scrolls sideways on the phone."""
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"the page scrolls sideways at {WIDTH} px ({width})"


async def snapshot(page: Page, name: str) -> None:
    """Keep a full-page screenshot in test-artifacts/ (for a person to look at)."""
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / name), full_page=True)
