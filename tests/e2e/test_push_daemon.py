"""Web Push and ntfy through a real `signoff daemon start`: the VAPID key is made in the
state dir, a person subscribes over the API, a request is pushed (encrypted, to a local
push service) and published to a fake ntfy server, and an ntfy button decides it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.api.helpers import eventually
from tests.e2e.daemons import DaemonProcess, toml_value
from tests.fakes.ntfy_server import FakeNtfy
from tests.fakes.push_service import FakePushService

KEY = "push-e2e-key-0123456789ab"
BOB = "push-e2e-bob-0123456789ab"


async def test_push_and_ntfy_through_the_daemon(tmp_path: Path) -> None:
    """Both surfaces are up in /health; the subscribed browser gets the request encrypted
    with Once and Deny; ntfy gets one message whose Once approves it as ntfy:<topic>."""
    async with FakePushService() as push, FakeNtfy(token="tk_e2e") as ntfy:
        daemon = DaemonProcess(tmp_path, extra_toml=f"""
[api]
key = {toml_value(KEY)}
keys = [{{name = "bob", key = {toml_value(BOB)}}}]

[webpush]
enabled = true
insecure_endpoints = true

[ntfy]
url = {toml_value(ntfy.url)}
topic = "ops-approvals"
token = "tk_e2e"

[approvals]
approvers = ["ntfy:ops-approvals"]
""")
        await asyncio.to_thread(daemon.start)
        try:
            async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
                await run_through(http, daemon, push, ntfy)
        finally:
            await asyncio.to_thread(daemon.stop)
    pem = next(tmp_path.rglob("vapid-private.pem"))
    assert pem.stat().st_mode & 0o777 == 0o600


async def run_through(http: httpx.AsyncClient, daemon: DaemonProcess,
                      push: FakePushService, ntfy: FakeNtfy) -> None:
    health = (await http.get("/health")).json()
    assert health["surfaces"]["webpush"] == "ok" and health["surfaces"]["ntfy"] == "ok"
    bob = {"Authorization": f"Bearer {BOB}"}
    assert (await http.get("/webpush/key", headers=bob)).status_code == 200
    browser = push.subscriber("phone")
    saved = await http.post("/webpush/subscriptions", json=browser.subscription, headers=bob)
    assert saved.status_code == 201, saved.text
    asked = await http.post("/v1/approvals", headers={"Authorization": f"Bearer {KEY}"},
                            json={"tool": "send_email", "args": {"to": "john@example.com",
                                                                 "subject": "hi", "body": "x"},
                                  "requester": "hermes:alice", "policy_id": "s-1"})
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["id"]

    async def delivered() -> bool:
        return bool(push.to("phone")) and bool(ntfy.published)
    await eventually(delivered, timeout=30, what="the push and the ntfy message")
    message = browser.decrypt(push.to("phone")[0].body)
    assert [a["action"] for a in message["actions"]] == ["once", "deny"]
    assert message["decide"] == f"{daemon.url}/webpush/decide"
    once = next(a for a in ntfy.published[0].body["actions"] if a["label"] == "Once")
    assert once["url"].startswith(f"{daemon.url}/ntfy/decide?token=")
    answers: list[httpx.Response] = []

    async def pressed() -> bool:  # 503 until the card id is stored, a moment after
        answers.append(await http.post(urlsplit(once["url"])._replace(
            scheme="", netloc="").geturl()))
        return answers[-1].status_code != 503
    await eventually(pressed, timeout=30, what="the ntfy button to be checkable")
    assert answers[-1].status_code == 200, answers[-1].text
    status = (await http.get(f"/v1/approvals/{approval_id}",
                             headers={"Authorization": f"Bearer {KEY}"})).json()
    assert (status["status"], status["decided_by"]) == ("approved", "ntfy:ops-approvals")
