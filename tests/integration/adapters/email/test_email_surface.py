"""E-mail as an approval surface, end to end: a request is mailed (through a real SMTP
server, tests/fakes/smtp.py) with one link per decision; following a link shows a page
and decides nothing; only the POST from that page decides, as ``email:<address>``."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pydantic import ValidationError

from signoff.bot.outbox import FOREVER
from signoff.bot.ports import SurfaceDeps
from signoff.config.settings import Settings, summary
from signoff.runtime.clock import Clock, FakeClock, SystemClock
from signoff.runtime.state import server_secret
from signoff.runtime.store.factory import make_store
from signoff.wiring import PendingCards, build_surfaces, prepare_state
from tests.api.helpers import Running, eventually, make_settings, running_node
from tests.fakes.smtp import FakeSmtpServer, ReceivedMessage

ALICE = "alice@example.com"
PUBLIC = "https://signoff.test"  # the daemon's address, as the daemon hands it to surfaces
ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1", "why": "tell John it shipped"}


@dataclass
class Mailed:
    """A running node whose e-mail surface sends to a fake SMTP server."""

    running: Running
    smtp: FakeSmtpServer
    api: httpx.AsyncClient  # holds the admin key
    anonymous: httpx.AsyncClient  # no key at all: what a mail reader's browser has
    smtp_up: bool = True

    def start_smtp(self) -> None:
        self.smtp.start()
        self.smtp_up = True

    async def ask(self, to: str = "john@example.com") -> str:
        body = {**ASK, "args": {"to": to, "subject": "hi", "body": "x"}}  # another "to": another card
        response = await self.api.post("/v1/approvals", json=body)
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    async def mail_for(self, approval_id: str, to: str = ALICE) -> ReceivedMessage:
        card_id = f"<signoff.{approval_id}.card@example.com>"

        def card_mails() -> list[ReceivedMessage]:
            return [m for m in self.smtp.messages
                    if m.message["Message-ID"] == card_id and m.recipients == [to]]

        async def arrived() -> bool:
            return bool(card_mails())
        await eventually(arrived, what=f"the mail of {approval_id} to {to}")

        async def kept() -> bool:  # the card's key is stored just after the mail went out
            cards = await self.running.node.store.cards(approval_id)
            return any(c.surface == "email" for c in cards)
        await eventually(kept, what=f"the e-mail card of {approval_id} stored")
        return card_mails()[0]

    async def status(self, approval_id: str) -> dict[str, Any]:
        return dict((await self.api.get(f"/v1/approvals/{approval_id}")).json())


def links(mail: ReceivedMessage) -> dict[str, str]:
    """Decision words -> link, from the plain-text part."""
    return {m[1]: m[2] for m in re.finditer(r"^(Approve once|Approve for this session|"
                                            r"Approve always[^:]*|Deny): (\S+)$",
                                            mail.body.replace("\r\n", "\n"), re.MULTILINE)}


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


def local(url: str) -> str:
    """The link's path and query, to follow it on the in-process app."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


@contextlib.asynccontextmanager
async def mailed(tmp_path: Path, *, approvers: tuple[str, ...] = (f"email:{ALICE}",),
                 to: tuple[str, ...] = (ALICE,), clock: Clock | None = None,
                 smtp_up: bool = True, refuse: frozenset[str] = frozenset(),
                 store_url: str | None = None,
                 hold: dict[str, str] | None = None) -> AsyncIterator[Mailed]:
    smtp = FakeSmtpServer(refuse=set(refuse))
    if smtp_up:
        smtp.start()
    mail: Mailed | None = None
    try:
        settings = make_settings(
            tmp_path, email={"host": smtp.host, "port": smtp.port, "from": "signoff@example.com"},
            approvals={"email_to": list(to), "approvers": list(approvers),
                       **({"hold": hold} if hold else {})})
        chosen = clock or SystemClock()
        cards = PendingCards()
        surfaces = build_surfaces(settings, deps=SurfaceDeps(
            clock=chosen, pending=cards, lookup=cards.lookup, public_url=PUBLIC,
            secret=server_secret(prepare_state(settings))))
        email = {"email": surfaces["email"]}
        store = make_store(store_url) if store_url else None
        async with running_node(tmp_path, settings=settings, clock=chosen, store=store,
                                surfaces=email) as running:
            cards.node = running.node
            async with running.client() as api, running.client(key=None) as anonymous:
                mail = Mailed(running=running, smtp=smtp, api=api, anonymous=anonymous,
                              smtp_up=smtp_up)
                yield mail
    finally:
        if mail.smtp_up if mail is not None else smtp_up:
            smtp.stop()


async def test_a_request_is_mailed_with_one_link_per_decision(tmp_path: Path) -> None:
    """Each approver gets a plain-text + HTML mail with a link for every allowed decision,
    pointing at the daemon's public URL."""
    async with mailed(tmp_path) as m:
        approval_id = await m.ask()
        mail = await m.mail_for(approval_id)
    assert mail.subject.startswith("Approval needed: ")
    assert mail.message["From"] == "signoff@example.com"
    assert mail.message.get_body(preferencelist=("html",)) is not None
    html = mail.message.get_body(preferencelist=("html",)).get_content()  # type: ignore[union-attr]
    found = links(mail)
    assert set(found) == {"Approve once", "Approve for this session", "Deny",
                          "Approve always (this exact action, from now on)"}
    for url in found.values():
        assert url.startswith(f"{PUBLIC}/email/confirm?token=")
        assert url.replace("&", "&amp;") in html
    assert "tell John it shipped" in mail.body


async def test_opening_a_link_shows_a_page_and_decides_nothing(tmp_path: Path) -> None:
    """GET (what a mail scanner does) shows the request and a POST form, without a key;
    the request stays pending however often the link is opened."""
    async with mailed(tmp_path) as m:
        approval_id = await m.ask()
        once = links(await m.mail_for(approval_id))["Approve once"]
        for _ in range(3):
            page = await m.anonymous.get(local(once))
            assert page.status_code == 200
        assert "<form method='post' action='confirm'>" in page.text  # = /email/confirm
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert f"email:{ALICE}" in page.text
        assert (await m.status(approval_id))["status"] == "pending"


async def test_the_post_decides_as_the_address_and_only_once(tmp_path: Path,
                                                             store_url: str) -> None:
    """The page's POST approves as email:<address> (audited so); using the link again says
    it was already decided and changes nothing (SQLite and PostgreSQL)."""
    async with mailed(tmp_path, store_url=store_url) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id))["Approve once"])
        done = await m.anonymous.post("/email/confirm", data={"token": token})
        assert done.status_code == 200, done.text
        status = await m.status(approval_id)
        assert (status["status"], status["decided_by"]) == ("approved", f"email:{ALICE}")
        events = (await m.api.get("/audit", params={"limit": 500})).json()["items"]
        decision = next(e for e in events
                        if e["approval_id"] == approval_id and e["kind"] == "decision")
        assert (decision["actor"], decision["scope"], decision["channel"]) == (
            f"email:{ALICE}", "once", "email")
        again = await m.anonymous.post("/email/confirm", data={"token": token})
        assert again.status_code == 409 and "already" in again.text
        assert (await m.anonymous.get("/email/confirm", params={"token": token})
                ).status_code == 409

        async def replied() -> bool:
            return any(r.message["In-Reply-To"] == f"<signoff.{approval_id}.card@example.com>"
                       for r in m.smtp.messages)
        await eventually(replied, what="the short 'decided' reply")
        reply = next(r for r in m.smtp.messages if r.message["In-Reply-To"])
        assert reply.recipients == [ALICE]
        assert f"by email:{ALICE}" in reply.body and "Approved once" in reply.body


async def test_a_held_request_mails_when_it_is_held_and_when_it_is_undone(
        tmp_path: Path) -> None:
    """Approved under an undo window: one mail says when it runs and where to undo it (the
    console's card), a second one the final outcome; each its own Message-ID."""
    async with mailed(tmp_path, hold={"SEND": "1h"}) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id))["Approve once"])
        assert (await m.anonymous.post("/email/confirm", data={"token": token})
                ).status_code == 200
        assert (await m.status(approval_id))["status"] == "held"

        def replies() -> list[ReceivedMessage]:
            return [r for r in m.smtp.messages if r.message["In-Reply-To"]]

        async def held_mail() -> bool:
            return len(replies()) >= 1
        await eventually(held_mail, what="the 'held' reply")
        held = replies()[0]
        assert held.message["Message-ID"] == f"<signoff.{approval_id}.held@example.com>"
        assert "unless undone" in held.body
        assert f"{PUBLIC}/console/cards/{approval_id}" in held.body
        undone = await m.api.post(f"/approvals/{approval_id}/undo")
        assert undone.status_code == 200, undone.text

        async def final_mail() -> bool:
            return len(replies()) >= 2
        await eventually(final_mail, what="the final reply")
        final = replies()[1]
        assert final.message["Message-ID"] == f"<signoff.{approval_id}.decided@example.com>"
        assert "unless undone" not in final.body and "/console/cards/" not in final.body
        assert len(replies()) == 2


async def test_deny_link_denies(tmp_path: Path) -> None:
    """The Deny link's page denies the request."""
    async with mailed(tmp_path) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id))["Deny"])
        assert (await m.anonymous.post("/email/confirm", data={"token": token})
                ).status_code == 200
        assert (await m.status(approval_id))["status"] == "denied"


def _swap_decision(token: str, decision: str) -> str:
    payload, _, mac = token.partition(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body["d"] = decision
    forged = base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":"),
                                                 sort_keys=True).encode()).rstrip(b"=")
    return f"{forged.decode()}.{mac}"


async def test_a_once_link_cannot_be_made_an_always(tmp_path: Path) -> None:
    """Rewriting the decision in a token breaks its signature (400, nothing decided); a
    form field asking for more than the token says is not heard."""
    async with mailed(tmp_path) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id))["Approve once"])
        forged = _swap_decision(token, "always")
        for method in ("GET", "POST"):
            answer = await m.anonymous.request(
                method, "/email/confirm", params={"token": forged} if method == "GET" else None,
                data={"token": forged} if method == "POST" else None)
            assert answer.status_code == 400 and "not a valid approval link" in answer.text
        assert (await m.status(approval_id))["status"] == "pending"
        done = await m.anonymous.post("/email/confirm",
                                      data={"token": token, "scope": "always"})
        assert done.status_code == 200
        assert (await m.status(approval_id))["scope"] == "once"
        grants = (await m.api.get("/grants")).json()["items"]
        assert [g["scope"] for g in grants] == ["once"]


async def test_tampered_cut_or_foreign_tokens_are_refused(tmp_path: Path) -> None:
    """A changed MAC, a cut token, garbage and another request's token are each refused
    with a page saying so, and decide nothing."""
    async with mailed(tmp_path) as m:
        first, second = await m.ask(), await m.ask(to="jane@example.com")
        token = token_of(links(await m.mail_for(first))["Approve once"])
        other = token_of(links(await m.mail_for(second))["Approve once"])
        payload, _, mac = token.partition(".")
        wrong = f"{payload}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
        # the second request's payload with the first one's MAC
        mixed = f"{other.partition('.')[0]}.{mac}"
        for bad in (wrong, token[:-5], "garbage", "", mixed):
            answer = await m.anonymous.post("/email/confirm", data={"token": bad})
            assert answer.status_code == 400, (bad, answer.status_code)
            assert "not a valid approval link" in answer.text
        as_json = await m.anonymous.post("/email/confirm", json={"token": token})
        assert as_json.status_code == 400, "only the page's urlencoded form is read"
        assert {(await m.status(i))["status"] for i in (first, second)} == {"pending"}


def _signed_with(claim: dict[str, Any], key: bytes) -> str:
    """A link token for ``claim`` signed with ``key`` the way every version signs links."""
    payload = base64.urlsafe_b64encode(json.dumps(claim, separators=(",", ":"),
                                                  sort_keys=True).encode()).rstrip(b"=")
    mac = hmac.new(key, b"signoff-email-link-v1:" + payload, hashlib.sha256).digest()
    return f"{payload.decode()}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


async def test_what_the_database_stores_forges_no_link(tmp_path: Path) -> None:
    """Someone who can read the database (the card's stored id) cannot sign an approving
    link with it: 400, nothing decided; the database holds nothing of the server secret."""
    async with mailed(tmp_path) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id))["Approve once"])
        claim = json.loads(base64.urlsafe_b64decode(
            token.partition(".")[0] + "=" * (-len(token.partition(".")[0]) % 4)))
        [card] = [c for c in await m.running.node.store.cards(approval_id)
                  if c.surface == "email"]
        forged = _signed_with({**claim, "d": "always"}, card.message_id.encode("ascii"))
        answer = await m.anonymous.post("/email/confirm", data={"token": forged})
        assert answer.status_code == 400 and "not a valid approval link" in answer.text
        assert (await m.status(approval_id))["status"] == "pending"
        secret = server_secret(prepare_state(m.running.node.settings))
        state = tmp_path.with_name(f"{tmp_path.name}-state")
        stored = b"".join(p.read_bytes() for p in state.glob("signoff.db*"))
        assert secret not in stored and base64.urlsafe_b64encode(secret)[:20] not in stored


async def test_an_address_that_is_not_an_approver_is_refused(tmp_path: Path) -> None:
    """A mailed address missing from approvals.approvers gets a 403 page; nothing decided."""
    async with mailed(tmp_path, to=(ALICE, "bob@example.com")) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id, "bob@example.com"))
                         ["Approve once"])
        refused = await m.anonymous.post("/email/confirm", data={"token": token})
        assert refused.status_code == 403 and "not an approver" in refused.text
        assert (await m.status(approval_id))["status"] == "pending"
        alice = token_of(links(await m.mail_for(approval_id))["Approve once"])
        assert alice != token
        assert (await m.anonymous.post("/email/confirm", data={"token": alice})
                ).status_code == 200


async def test_a_link_expires_with_its_request(tmp_path: Path) -> None:
    """Past the request's expiry the link shows an "expired" page and decides nothing."""
    clock = FakeClock()
    async with mailed(tmp_path, clock=clock) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id))["Approve once"])
        clock.advance(31 * 60)  # approvals.timeout is 30m
        for answer in (await m.anonymous.get("/email/confirm", params={"token": token}),
                       await m.anonymous.post("/email/confirm", data={"token": token})):
            assert answer.status_code == 410 and "expired" in answer.text
        assert (await m.status(approval_id))["status"] == "pending"
        await m.running.node.decider.expire_due()  # what the daemon's timer does
        assert (await m.status(approval_id))["status"] == "expired"
        for answer in (await m.anonymous.get("/email/confirm", params={"token": token}),
                       await m.anonymous.post("/email/confirm", data={"token": token})):
            assert answer.status_code == 410 and "expired" in answer.text


async def test_an_smtp_outage_is_retried_through_the_outbox(tmp_path: Path) -> None:
    """With the SMTP server down the card waits in the outbox and is retried with
    backoff; once the server is up the mail arrives, and its links work."""
    async with mailed(tmp_path, smtp_up=False) as m:
        approval_id = await m.ask()
        store = m.running.node.store

        async def failed_once() -> bool:
            items = await store.due_outbox(FOREVER, limit=100)
            return any(i.surface == "email" and i.attempts >= 1 and i.error for i in items)
        await eventually(failed_once, what="a failed SMTP attempt")
        assert m.smtp.messages == []
        m.start_smtp()
        token = token_of(links(await m.mail_for(approval_id))["Approve once"])
        assert (await m.anonymous.post("/email/confirm", data={"token": token})
                ).status_code == 200


async def test_a_refused_address_does_not_hold_back_the_others(tmp_path: Path) -> None:
    """One address refused (550) by the SMTP server: the others get their mail once, the
    card is kept, its links work."""
    async with mailed(tmp_path, to=(ALICE, "gone@example.com"),
                      refuse=frozenset({"gone@example.com"})) as m:
        approval_id = await m.ask()
        token = token_of(links(await m.mail_for(approval_id))["Approve once"])
        assert (await m.anonymous.post("/email/confirm", data={"token": token})
                ).status_code == 200
        cards = [mail for mail in m.smtp.messages if mail.subject.startswith("Approval")]
        assert [mail.recipients for mail in cards] == [[ALICE]]


async def test_every_address_refused_gives_the_card_up(tmp_path: Path) -> None:
    """When the SMTP server refuses every address the card is given up on email (not
    retried forever) and /health lists it as undelivered."""
    async with mailed(tmp_path, refuse=frozenset({ALICE})) as m:
        approval_id = await m.ask()

        async def undelivered() -> list[dict[str, Any]]:
            items = (await m.api.get("/health")).json()["undelivered"]
            return [u for u in items if u["approval_id"] == approval_id]

        async def given_up() -> bool:
            return bool(await undelivered())
        await eventually(given_up, what="the e-mail card given up")
        (item,) = await undelivered()
        assert item["surface"] == "email" and "refused" in item["error"]
        assert m.smtp.messages == []


def test_email_to_needs_the_email_section(tmp_path: Path) -> None:
    """approvals.email_to without [email] is a config error naming both."""
    with pytest.raises(ValidationError, match=r"approvals\.email_to: needs an \[email\] section"):
        make_settings(tmp_path, approvals={"email_to": [ALICE]})


def test_email_to_on_a_wildcard_host_needs_a_public_url(tmp_path: Path) -> None:
    """Links must lead somewhere: 0.0.0.0 without daemon.public_url is a config error."""
    with pytest.raises(ValidationError, match=r"needs daemon\.public_url"):
        make_settings(tmp_path, host="0.0.0.0", email={"host": "smtp"},
                      approvals={"email_to": [ALICE]})


def test_email_approvers_and_addresses_are_checked(tmp_path: Path) -> None:
    """email:<address> is an approver form; a malformed address is refused; the surface is
    listed with its addresses (lowercased) once configured."""
    settings = Settings.model_validate({
        "daemon": {"work_dir": str(tmp_path), "public_url": "https://s.example.com"},
        "email": {"host": "smtp"},
        "approvals": {"email_to": ["Alice@Example.com"], "approvers": [f"email:{ALICE}"]}})
    section = settings.surface("email")
    assert section is not None and section.model_dump()["to"] == [ALICE]
    assert section.model_dump()["public_url"] == "https://s.example.com"
    assert "surfaces: web, email (alice@example.com)" in summary(settings, None)
    without = make_settings(tmp_path, email={"host": "smtp"}, approvals={"email_to": [ALICE]})
    assert without.surface("email").model_dump()["public_url"] is None  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="invalid e-mail address 'not-an-address'"):
        make_settings(tmp_path, email={"host": "smtp"},
                      approvals={"email_to": ["not-an-address"]})
    with pytest.raises(ValidationError, match=re.escape("'email:<address>' such as 'email:alice@example.com'")):
        make_settings(tmp_path, approvals={"approvers": ["email:nobody"]})


def test_the_links_need_a_reachable_address() -> None:
    """Without daemon.public_url the daemon's own address is used, but never a wildcard one."""
    from signoff.adapters.email import PLUGIN
    from signoff.errors import ConfigError
    from signoff.testing import surface_deps

    section = PLUGIN.settings.model_validate({"to": [ALICE]})  # type: ignore[union-attr]
    for address in (None, "http://0.0.0.0:8080"):
        deps = replace(surface_deps(), public_url=address)
        with pytest.raises(ConfigError, match=r"need daemon\.public_url"):
            PLUGIN.build(section, deps)
    built = PLUGIN.build(section, replace(surface_deps(), public_url="http://127.0.0.1:9"))
    assert built.name == "email"


async def test_a_mail_link_works_in_a_browser_signed_in_to_the_console(tmp_path: Path) -> None:
    """The confirmation form's POST from a browser that also holds a console cookie (sent
    with it, no CSRF header) decides: the link's route ignores the cookie; it was 403."""
    from tests.api.helpers import KEY

    async with mailed(tmp_path) as m:
        approval_id = await m.ask()
        once = links(await m.mail_for(approval_id))["Approve once"]
        async with m.running.client(key=None) as browser:
            await browser.post("/login", data={"key": KEY, "next": "/"})
            assert "signoff_session" in browser.cookies
            done = await browser.post("/email/confirm", data={"token": token_of(once)})
        status = await m.status(approval_id)
    assert done.status_code == 200, done.text
    assert status["decided_by"] == f"email:{ALICE}"
