"""ntfy end to end: each request is one JSON publish (ntfy's wire format) to a fake ntfy
server (tests/fakes/ntfy_server.py) with Once/Deny http buttons on signed, single-use URLs
and Open; the test presses them as the ntfy app would; a decision is a follow-up message
saying by whom; priority follows the risk; Once only on a message that shows the whole
request."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
from pydantic import ValidationError

from signoff.bot.ports import CardRef, SurfaceDeps
from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.runtime.clock import SystemClock
from signoff.runtime.models import Scope
from signoff.runtime.state import server_secret
from signoff.wiring import PendingCards, build_surfaces, prepare_state
from tests.api.helpers import Running, eventually, make_settings, running_node
from tests.fakes.ntfy_server import FakeNtfy

PUBLIC = "https://signoff.test"
TOPIC = "alice-approvals"
ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1"}


@dataclass
class Published:
    """A running node with the ntfy surface publishing to a fake ntfy server."""

    running: Running
    ntfy: FakeNtfy
    admin: httpx.AsyncClient
    phone: httpx.AsyncClient  # the ntfy app pressing a button: no key, no cookie

    async def ask(self, to: str = "john@example.com") -> str:
        body = {**ASK, "args": {"to": to, "subject": "hi", "body": "x"}}
        response = await self.admin.post("/v1/approvals", json=body)
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    async def message(self, approval_id: str, title: str = "SEND: ") -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        async def arrived() -> bool:
            found[:] = [p.body for p in self.ntfy.published if p.body["title"].startswith(title)
                        and p.body["click"].endswith(f"/console/cards/{approval_id}")]
            return bool(found)
        await eventually(arrived, what=f"the ntfy message of {approval_id}")

        async def kept() -> bool:
            return any(c.surface == "ntfy"
                       for c in await self.running.node.store.cards(approval_id))
        await eventually(kept, what="the ntfy card stored")
        return found[-1]

    async def press(self, message: dict[str, Any], label: str) -> httpx.Response:
        """Do what the ntfy app does for an http action: its method to its URL."""
        action = next(a for a in message["actions"] if a["label"] == label)
        assert action["action"] == "http" and action["url"].startswith(PUBLIC + "/ntfy/")
        parts = urlsplit(action["url"])
        return await self.phone.request(action["method"], f"{parts.path}?{parts.query}")

    async def status(self, approval_id: str) -> dict[str, Any]:
        return dict((await self.admin.get(f"/v1/approvals/{approval_id}")).json())


@contextlib.asynccontextmanager
async def published(tmp_path: Path, *, token: str | None = "tk_secret",
                    approvers: tuple[str, ...] = (f"ntfy:{TOPIC}",),
                    **approvals: Any) -> AsyncIterator[Published]:
    async with FakeNtfy(token=token) as ntfy:
        section = {"url": ntfy.url, "topic": TOPIC, **({"token": token} if token else {})}
        settings = make_settings(tmp_path, ntfy=section,
                                 approvals={"approvers": list(approvers), **approvals})
        cards = PendingCards()
        surfaces = build_surfaces(settings, deps=SurfaceDeps(
            clock=SystemClock(), pending=cards, lookup=cards.lookup, public_url=PUBLIC,
            secret=server_secret(prepare_state(settings))))
        async with running_node(tmp_path, settings=settings,
                                surfaces={"ntfy": surfaces["ntfy"]}) as running:
            cards.node = running.node
            async with running.client() as admin, running.client(key=None) as phone:
                yield Published(running, ntfy, admin, phone)


async def test_a_request_is_one_json_publish_with_buttons(tmp_path: Path) -> None:
    """One publish per request to the topic, with the token as Bearer, priority 4 for
    SEND, Once and Deny as http POST actions and Open as a view action."""
    async with published(tmp_path) as p:
        approval_id = await p.ask()
        message = await p.message(approval_id)
        sent = p.ntfy.published[0]
    assert sent.headers["Authorization"] == "Bearer tk_secret"
    assert message["topic"] == TOPIC and message["priority"] == 4
    assert [(a["action"], a["label"]) for a in message["actions"]] == [
        ("http", "Once"), ("http", "Deny"), ("view", "Open")]
    assert all(a["method"] == "POST" for a in message["actions"][:2])
    assert message["actions"][2]["url"] == f"{PUBLIC}/console/cards/{approval_id}"


async def test_once_decides_once_and_a_follow_up_says_by_whom(tmp_path: Path) -> None:
    """Pressing Once approves that request as ntfy:<topic>; pressing it again is refused
    with a message; a follow-up message says who decided."""
    async with published(tmp_path) as p:
        approval_id = await p.ask()
        message = await p.message(approval_id)
        first = await p.press(message, "Once")
        replay = await p.press(message, "Once")
        deny_after = await p.press(message, "Deny")
        status = await p.status(approval_id)
        follow_up = await p.message(approval_id, title="Decided: ")
    assert first.status_code == 200 and first.json()["accepted"] is True
    assert status["status"] == "approved" and status["decided_by"] == f"ntfy:{TOPIC}"
    assert replay.status_code == 409 and "already" in replay.json()["message"]
    assert deny_after.status_code == 409
    assert f"ntfy:{TOPIC}" in follow_up["message"] and "actions" not in follow_up


async def test_a_button_of_another_request_decides_nothing_here(tmp_path: Path) -> None:
    """A token whose approval id is changed to another request's is refused; that other
    request stays pending."""
    async with published(tmp_path) as p:
        first = await p.ask("a@example.com")
        second = await p.ask("b@example.com")
        message = await p.message(first)
        await p.message(second)
        url = next(a["url"] for a in message["actions"] if a["label"] == "Once")
        token = url.partition("token=")[2]
        payload, _, mac = token.partition(".")
        claim = base64.urlsafe_b64decode(payload + "==").replace(first.encode(),
                                                                  second.encode())
        forged = base64.urlsafe_b64encode(claim).rstrip(b"=").decode() + "." + mac
        refused = await p.phone.post(f"/ntfy/decide?token={forged}")
        status = await p.status(second)
    assert refused.status_code == 400 and "not a valid" in refused.json()["message"]
    assert status["status"] == "pending"


async def test_a_topic_that_is_not_an_approver_decides_nothing(tmp_path: Path) -> None:
    """The buttons decide as ntfy:<topic>, who must be among the approvers."""
    async with published(tmp_path, approvers=("slack:U1",)) as p:
        approval_id = await p.ask()
        answer = await p.press(await p.message(approval_id), "Once")
        status = await p.status(approval_id)
    assert answer.status_code == 409 and "Not authorized" in answer.json()["message"]
    assert status["status"] == "pending"


async def test_step_up_requests_get_open_only(tmp_path: Path) -> None:
    """Under step-up the message carries Open only."""
    async with published(tmp_path, step_up=["SEND"]) as p:
        message = await p.message(await p.ask())
    assert [a["label"] for a in message["actions"]] == ["Open"]


def test_the_section_is_checked(tmp_path: Path) -> None:
    """A bad topic or URL is a config error naming the key; without daemon.public_url the
    surface is not built."""
    with pytest.raises(ValidationError, match="topic"):
        make_settings(tmp_path, ntfy={"topic": "no spaces allowed"})
    with pytest.raises(ValidationError, match="url"):
        make_settings(tmp_path, ntfy={"topic": "t", "url": "ntfy.sh"})
    settings: Settings = make_settings(tmp_path, ntfy={"topic": "t"})
    with pytest.raises(ConfigError, match="public_url"):
        build_surfaces(settings, deps=SurfaceDeps(clock=SystemClock(), pending=PendingCards(),
                                                  secret=b"s" * 32))


async def test_an_escalation_publishes_the_request_again(tmp_path: Path) -> None:
    """A reminder or escalation under a pending request publishes it again, its words
    first and its buttons working."""
    async with published(tmp_path) as p:
        approval_id = await p.ask()
        await p.message(approval_id)
        surface = p.running.node.surfaces["ntfy"]
        ref = next(CardRef(c.surface, c.channel, c.message_id)
                   for c in await p.running.node.store.cards(approval_id) if c.surface == "ntfy")
        await surface.notify("", "Escalated to you", thread=ref, mentions=[f"ntfy:{TOPIC}"])
        again = p.ntfy.published[-1].body
        count = len(p.ntfy.published)
        answer = await p.press(again, "Deny")
        status = await p.status(approval_id)
    assert count == 2 and again["message"].startswith("Escalated to you")
    assert answer.status_code == 200 and status["status"] == "denied"


async def test_a_title_cut_before_the_attacker_offers_deny_and_open_only(
        tmp_path: Path) -> None:
    """An e-mail to ten recipients has a title longer than a message's, cut before the
    last one, the attacker's: the message names every recipient, and offers Deny and
    Open but no Once. A Once URL for it (as a message sent before this rule carried) is
    refused with the console link; its Deny is taken."""
    to = [f"accounts.payable.{i}@supplier-{i}.example.com" for i in range(9)]
    to.append("billing@supp1ier-payments.example")
    async with published(tmp_path) as p:
        response = await p.admin.post("/v1/approvals", json={
            **ASK, "args": {"to": to, "subject": "Invoice", "body": "Please pay."}})
        approval_id = str(response.json()["id"])
        message = await p.message(approval_id)
        surface = p.running.node.surfaces["ntfy"]
        posted = await surface.lookup(approval_id)
        assert posted is not None
        [card_id] = [c.message_id for c in await p.running.node.store.cards(approval_id)
                     if c.surface == "ntfy"]
        once = surface.links.sign(posted.card, card_id, Scope.ONCE, f"ntfy:{TOPIC}")
        refused = await p.phone.post(f"/ntfy/decide?{urlencode({'token': once})}")
        pending = (await p.status(approval_id))["status"]
        denied = await p.press(message, "Deny")
        status = await p.status(approval_id)
    assert message["title"].endswith("…") and "supp1ier" not in message["title"]
    assert "billing@supp1ier-payments.example" in message["message"]
    assert [a["label"] for a in message["actions"]] == ["Deny", "Open"]
    assert refused.status_code == 409 and refused.json()["accepted"] is False
    assert refused.json()["message"].startswith("Confirm in the console")
    assert pending == "pending"
    assert denied.status_code == 200 and status["status"] == "denied"


async def test_a_transfer_is_published_with_its_account_and_amount(tmp_path: Path) -> None:
    """An outside ``bank.transfer`` shows its account and amount in the message that
    offers Once (they were nowhere in it)."""
    async with published(tmp_path) as p:
        response = await p.admin.post("/v1/approvals", json={
            "tool": "bank.transfer", "args": {"to_account": "DE89370400440532013000",
                                              "amount_eur": 250000},
            "risk": "SEND", "requester": "hermes:alice@laptop", "policy_id": "s-1"})
        message = await p.message(str(response.json()["id"]))
    assert "DE89370400440532013000" in message["message"]
    assert "250000" in message["message"]
    assert [a["label"] for a in message["actions"]] == ["Once", "Deny", "Open"]


async def test_long_non_ascii_requests_are_published_as_messages(tmp_path: Path) -> None:
    """ntfy takes a message of 4,096 bytes or more for an attachment (refused without an
    attachment cache, as by the fake; a file, not the text, on ntfy.sh). 1,000 CJK
    characters (3,000 bytes) are published whole with Once; a subject and a body of
    1,100 emoji (4,400 bytes, 1,100 characters) are cut to fit, with Deny and Open."""
    async with published(tmp_path) as p:
        asked: dict[str, str] = {}
        for name, subject, text in (("cjk", "hi", "請求書" * 333 + "。"),
                                    ("emoji", "🙂" * 100, "🙂" * 1000)):
            response = await p.admin.post("/v1/approvals", json={
                **ASK, "args": {"to": "john@example.com", "subject": subject, "body": text}})
            asked[name] = str(response.json()["id"])
        whole = await p.message(asked["cjk"])
        cut = await p.message(asked["emoji"])
        pressed = await p.press(whole, "Once")
        status = await p.status(asked["cjk"])
    assert "請求書" * 333 + "。" in whole["message"]
    assert [a["label"] for a in whole["actions"]] == ["Once", "Deny", "Open"]
    assert cut["message"].endswith("🙂…") and len(cut["message"].encode()) < 4096
    assert [a["label"] for a in cut["actions"]] == ["Deny", "Open"]
    assert pressed.status_code == 200 and status["status"] == "approved"
