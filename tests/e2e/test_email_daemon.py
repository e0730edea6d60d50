"""E-mail approvals through a real `signoff daemon start`: the card is mailed to a real
SMTP server (tests/fakes/smtp.py), its link is followed over HTTP without any key, and
only the confirmation page's POST decides."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.daemons import DaemonProcess, toml_value, wait_for
from tests.fakes.smtp import FakeSmtpServer

KEY = "email-e2e-key-0123456789"


@pytest.fixture
def smtp() -> Iterator[FakeSmtpServer]:
    with FakeSmtpServer() as server:
        yield server


@pytest.fixture
def daemon(tmp_path: Path, smtp: FakeSmtpServer) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path, extra_toml=f"""
[api]
key = {toml_value(KEY)}

[email]
host = {toml_value(smtp.host)}
port = {smtp.port}
from = "signoff@example.com"

[approvals]
email_to = ["alice@example.com"]
approvers = ["email:alice@example.com"]
""")
    d.start()
    try:
        yield d
    finally:
        d.stop()


def test_a_mailed_link_approves_through_the_daemon(daemon: DaemonProcess,
                                                   smtp: FakeSmtpServer) -> None:
    """The link points at the daemon's address (its --port, no public_url set); GET shows
    the page without a key and decides nothing; the POST approves as email:alice."""
    api = httpx.Client(base_url=daemon.url, headers={"Authorization": f"Bearer {KEY}"},
                       timeout=30)
    assert daemon.health()["surfaces"]["email"] == "ok"
    asked = api.post("/v1/approvals", json={
        "tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
        "requester": "hermes:alice", "policy_id": "s-1"})
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["id"]
    wait_for(lambda: smtp.messages, "the card's mail")
    body = smtp.messages[0].body.replace("\r\n", "\n")
    once = re.search(r"^Approve once: (\S+)$", body, re.MULTILINE)
    assert once is not None, body
    assert once[1].startswith(f"{daemon.url}/email/confirm?token=")
    pages: list[httpx.Response] = []

    def opened() -> bool:  # no key: what a mail reader's browser has
        pages.append(httpx.get(once[1], timeout=30))
        return pages[-1].status_code != 503  # 503: the card's key is not stored yet
    wait_for(opened, "the link to be checkable")
    assert pages[-1].status_code == 200 and "<form method='post'" in pages[-1].text
    assert api.get(f"/v1/approvals/{approval_id}").json()["status"] == "pending"
    assert httpx.get(f"{daemon.url}/approvals", timeout=30).status_code == 401
    token = httpx.URL(once[1]).params["token"]
    done = httpx.post(f"{daemon.url}/email/confirm", data={"token": token}, timeout=30)
    assert done.status_code == 200, done.text
    status = api.get(f"/v1/approvals/{approval_id}").json()
    assert (status["status"], status["decided_by"]) == ("approved", "email:alice@example.com")
    again = httpx.post(f"{daemon.url}/email/confirm", data={"token": token}, timeout=30)
    assert again.status_code == 409
