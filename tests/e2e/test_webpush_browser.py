"""Web Push in a real browser (Playwright + Debian chromium, 375×812): the console
registers its service worker; a request's push — sent by the daemon through pywebpush to a
local push service and decrypted there with the subscription's keys — is delivered to the
service worker with the DevTools protocol (``ServiceWorker.deliverPushMessage``); the
notification it shows carries Once and Deny, and its Once decides exactly that approval.

What is exercised: the real service worker's ``push`` handler and ``showNotification``,
and its click handler's body (``handleClick``, what ``notificationclick`` runs) called in
the worker on the notification it showed — headless chromium offers no way to press a
notification's button, so the OS click itself is not. The browser's own push service is
not reached either (headless chromium has none): the daemon pushes to the local one.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from signoff.bot.ports import SurfaceDeps
from signoff.runtime.clock import SystemClock
from signoff.runtime.state import server_secret
from signoff.wiring import PendingCards, build_surfaces, prepare_state
from tests.api.helpers import (
    KEY,
    eventually,
    loopback_socket,
    make_settings,
    wait_state,
    webhook_steps,
)
from tests.e2e.phone import fits, phone_console, snapshot
from tests.fakes.http_echo import HttpEcho
from tests.fakes.push_service import FakePushService

pytestmark = pytest.mark.browser


async def test_a_pushed_request_is_approved_from_its_notification(tmp_path: Path) -> None:
    """The service worker registers; the pushed request shows as a notification with Once
    and Deny, its non-ASCII text as written (the push is UTF-8 JSON); its Once approves
    that request once, as the person who subscribed."""
    sock = loopback_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings = make_settings(tmp_path, webpush={"enabled": True, "insecure_endpoints": True})
    cards = PendingCards()
    state = prepare_state(settings)
    surfaces = build_surfaces(settings, deps=SurfaceDeps(
        clock=SystemClock(), pending=cards, lookup=cards.lookup, public_url=base,
        secret=server_secret(state), state_dir=state, subscriptions=cards))
    async with FakePushService() as push, HttpEcho() as echo, phone_console(
            tmp_path, settings=settings, surfaces={"webpush": surfaces["webpush"]},
            sock=sock) as phone:
        cards.node = phone.node.node
        page, api = phone.page, phone.api
        await phone.context.grant_permissions(["notifications"], origin=base)
        cdp = await phone.context.new_cdp_session(page)
        registrations: list[dict[str, Any]] = []
        cdp.on("ServiceWorker.workerRegistrationUpdated",
               lambda event: registrations.extend(event["registrations"]))
        await cdp.send("ServiceWorker.enable")

        await page.goto(f"{base}/?key={KEY}")
        state_of_worker = await page.evaluate(
            "navigator.serviceWorker.ready.then(r => r.active && r.active.scriptURL)")
        assert state_of_worker == f"{base}/static/sw.js"
        panel = page.locator("#push")
        await panel.wait_for(state="visible", timeout=10_000)  # GET /webpush/key answered
        await fits(page)
        await snapshot(page, "console-notifications.png")
        # Headless chromium has no push service: subscribing fails, and the panel says why
        # (a phone's browser subscribes; the test stands in for it below, over the API).
        await panel.get_by_role("button", name="Enable notifications").click()
        await page.wait_for_function(
            "document.querySelector('#push .push-state').textContent.indexOf('Get each') < 0",
            timeout=10_000)
        said = await panel.locator(".push-state").inner_text()
        assert said.startswith("Could not turn notifications on: "), said
        await snapshot(page, "console-notifications-refused.png")

        browser = push.subscriber("phone")
        saved = await api.post("/webpush/subscriptions", json=browser.subscription)
        assert saved.status_code == 201, saved.text
        steps = webhook_steps(echo.url("/hook"), {"text": "Релиз 2.4 выкатан 🚀"})
        submitted = await api.post("/tasks", json={"goal": "tell the team", "steps": steps})
        task = await wait_state(api, submitted.json()["id"], "waiting_approval")
        approval_id = task["approval"]["id"]

        async def pushed() -> bool:
            return bool(push.to("phone"))
        await eventually(pushed, what="the push of the request")
        data = browser.plaintext(push.to("phone")[0].body)
        message = json.loads(data)
        assert message["tag"] == f"signoff-{approval_id}"

        await eventually(lambda: asyncio.sleep(0, bool(registrations)),
                         what="the service worker's registration")
        registration = next(r for r in registrations if r["scopeURL"] == f"{base}/")
        await cdp.send("ServiceWorker.deliverPushMessage", {
            "origin": base, "registrationId": registration["registrationId"],
            "data": data.decode()})  # the bytes as pushed, as the browser reads them
        worker = phone.context.service_workers[0]
        shown: list[dict[str, Any]] = []

        async def notification() -> bool:
            shown[:] = await worker.evaluate(
                "tag => self.registration.getNotifications({tag}).then(ns => ns.map(n => "
                "({title: n.title, body: n.body, actions: n.actions.map(a => a.action)})))",
                message["tag"])
            return bool(shown)
        await eventually(notification, what="the notification shown")
        assert shown[0]["actions"] == ["once", "deny"]
        assert "Релиз 2.4 выкатан 🚀" in shown[0]["body"], shown[0]["body"]
        assert shown[0]["title"].startswith("SEND: ")

        answer = await worker.evaluate(
            "tag => self.registration.getNotifications({tag}).then("
            "ns => self.handleClick(ns[0], 'once'))", message["tag"])
        assert answer["accepted"] is True, answer
        done = await wait_state(api, task["id"], "completed")
        assert done["actions"][0]["decision"] == "approved:once"
        assert done["actions"][0]["decided_by"] == "web:admin"
        after = await worker.evaluate(
            "tag => self.registration.getNotifications({tag}).then(ns => ns.map(n => "
            "({title: n.title, actions: n.actions.length})))", message["tag"])
        assert after and after[0]["title"] == "Done" and after[0]["actions"] == 0
