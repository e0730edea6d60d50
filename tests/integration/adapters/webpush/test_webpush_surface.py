"""Web Push end to end: a signed-in person subscribes a browser; each request they may
decide is pushed (pywebpush, VAPID, aes128gcm) to a local push service
(tests/fakes/push_service.py), decrypted here with the browser's keys; the notification's
Once/Deny tokens decide exactly that request, once; gone subscriptions are pruned."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec

from signoff.bot.ports import CardRef, SurfaceDeps
from signoff.runtime.clock import SystemClock
from signoff.runtime.models import Scope
from signoff.runtime.state import server_secret
from signoff.wiring import (
    PendingCards,
    build_surfaces,
    forget_stale_subscriptions,
    prepare_state,
)
from tests.api.helpers import BOB_KEY, Running, eventually, make_settings, running_node
from tests.fakes.push_service import FakePushService, Subscriber

PUBLIC = "https://signoff.test"
ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1", "why": "tell John it shipped"}


@dataclass
class Pushed:
    """A running node with the webpush surface, and the push service it sends to."""

    running: Running
    push: FakePushService
    admin: httpx.AsyncClient  # asks
    bob: httpx.AsyncClient  # subscribes and decides (an approver key)
    anonymous: httpx.AsyncClient  # what a service worker's fetch has: no key, no cookie

    async def subscribe(self, name: str) -> tuple[Subscriber, str]:
        browser = self.push.subscriber(name)
        response = await self.bob.post("/webpush/subscriptions", json=browser.subscription)
        assert response.status_code == 201, response.text
        return browser, str(response.json()["id"])

    async def ask(self, to: str = "john@example.com") -> str:
        body = {**ASK, "args": {"to": to, "subject": "hi", "body": "x"}}
        response = await self.admin.post("/v1/approvals", json=body)
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    async def message(self, browser: Subscriber, name: str, approval_id: str,
                      kind: str = "card") -> dict[str, Any]:
        """The decrypted push of ``kind`` for ``approval_id`` to ``name``."""
        found: list[dict[str, Any]] = []

        async def arrived() -> bool:
            found[:] = [m for r in self.push.to(name) if (m := browser.decrypt(r.body))
                        ["tag"] == f"signoff-{approval_id}" and m["kind"] == kind]
            return bool(found)
        await eventually(arrived, what=f"a {kind} push of {approval_id} to {name}")

        async def kept() -> bool:  # the card id (its tokens' key) is stored after the push
            return any(c.surface == "webpush"
                       for c in await self.running.node.store.cards(approval_id))
        await eventually(kept, what="the webpush card stored")
        return found[-1]

    async def status(self, approval_id: str) -> dict[str, Any]:
        return dict((await self.admin.get(f"/v1/approvals/{approval_id}")).json())


@contextlib.asynccontextmanager
async def pushed(tmp_path: Path, **approvals: Any) -> AsyncIterator[Pushed]:
    async with FakePushService() as push:
        settings = make_settings(tmp_path, webpush={"enabled": True,
                                                    "insecure_endpoints": True},
                                 **({"approvals": approvals} if approvals else {}))
        cards = PendingCards()
        state = prepare_state(settings)
        surfaces = build_surfaces(settings, deps=SurfaceDeps(
            clock=SystemClock(), pending=cards, lookup=cards.lookup, public_url=PUBLIC,
            secret=server_secret(state), state_dir=state, subscriptions=cards))
        async with running_node(tmp_path, settings=settings,
                                surfaces={"webpush": surfaces["webpush"]}) as running:
            cards.node = running.node
            async with (running.client() as admin, running.client(key=BOB_KEY) as bob,
                        running.client(key=None) as anonymous):
                yield Pushed(running, push, admin, bob, anonymous)


def vapid_claims(authorization: str, public_key: str) -> dict[str, Any]:
    """The claims of a ``vapid t=<JWT>, k=<key>`` header (RFC 8292), checked: ``k`` is the
    daemon's public key and the JWT's ES256 signature verifies with it."""
    scheme, _, params = authorization.partition(" ")
    fields = dict(part.strip().split("=", 1) for part in params.split(","))
    assert scheme == "vapid" and fields["k"] == public_key
    point = base64.urlsafe_b64decode(public_key + "==")
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    return dict(jwt.decode(fields["t"], key, algorithms=["ES256"],
                           options={"verify_aud": False}))


def token(message: dict[str, Any], action: str) -> str:
    return next(str(a["token"]) for a in message["actions"] if a["action"] == action)


async def test_the_vapid_key_is_made_once_in_the_state_dir_0600(tmp_path: Path) -> None:
    """GET /webpush/key gives the browser's applicationServerKey (a P-256 point); the
    private key is a 0600 file of the state dir, the same on every start."""
    async with pushed(tmp_path) as p:
        first = (await p.bob.get("/webpush/key")).json()["public_key"]
    async with pushed(tmp_path) as p:
        again = (await p.bob.get("/webpush/key")).json()["public_key"]
    raw = base64.urlsafe_b64decode(first + "==")
    assert len(raw) == 65 and raw[0] == 4 and again == first
    pem = tmp_path.with_name(f"{tmp_path.name}-state") / "vapid-private.pem"
    assert pem.stat().st_mode & 0o777 == 0o600


async def test_a_request_is_pushed_encrypted_with_once_and_deny(tmp_path: Path) -> None:
    """The push service receives an aes128gcm message whose VAPID JWT verifies with the
    daemon's public key (aud: the push service, sub: public_url); decrypted with
    the browser's keys it is the request with Once and Deny tokens and the console link."""
    async with pushed(tmp_path) as p:
        public_key = (await p.bob.get("/webpush/key")).json()["public_key"]
        port = p.push.port
        browser, _ = await p.subscribe("phone")
        approval_id = await p.ask()
        message = await p.message(browser, "phone", approval_id)
        request = p.push.to("phone")[0]
    assert request.headers["content-encoding"] == "aes128gcm"
    assert int(request.headers["ttl"]) > 0
    claims = vapid_claims(request.headers["authorization"], public_key)
    assert claims["aud"] == f"http://127.0.0.1:{port}" and claims["sub"] == PUBLIC
    assert message["title"].startswith("SEND: ")
    assert "tell John it shipped" in message["body"]
    assert [a["action"] for a in message["actions"]] == ["once", "deny"]
    assert message["url"] == f"{PUBLIC}/console/cards/{approval_id}"
    assert message["decide"] == f"{PUBLIC}/webpush/decide"


async def test_the_once_action_decides_that_request_once(tmp_path: Path) -> None:
    """Posting the Once token approves exactly that request as the subscriber; posting it
    again is refused with a message; the notification is then replaced by the outcome."""
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        approval_id = await p.ask()
        once = token(await p.message(browser, "phone", approval_id), "once")
        first = await p.anonymous.post("/webpush/decide", json={"token": once})
        again = await p.anonymous.post("/webpush/decide", json={"token": once})
        status = await p.status(approval_id)
        decided = await p.message(browser, "phone", approval_id, kind="decided")
    assert first.status_code == 200 and first.json()["accepted"] is True
    assert status["status"] == "approved" and status["decided_by"] == "web:bob"
    assert again.status_code == 409
    assert "already" in again.json()["message"]
    assert "web:bob" in decided["body"] and decided["actions"] == []


async def test_a_token_decides_only_its_own_request(tmp_path: Path) -> None:
    """A token whose approval id is swapped for another request's is not valid, and
    deciding one request leaves the other pending."""
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        first = await p.ask("a@example.com")
        second = await p.ask("b@example.com")
        deny = token(await p.message(browser, "phone", first), "deny")
        await p.message(browser, "phone", second)
        payload, _, mac = deny.partition(".")
        claim = base64.urlsafe_b64decode(payload + "==").replace(first.encode(),
                                                                  second.encode())
        forged = base64.urlsafe_b64encode(claim).rstrip(b"=").decode() + "." + mac
        refused = await p.anonymous.post("/webpush/decide", json={"token": forged})
        garbage = await p.anonymous.post("/webpush/decide", json={"token": "x.y"})
        ok = await p.anonymous.post("/webpush/decide", json={"token": deny})
        states = (await p.status(first))["status"], (await p.status(second))["status"]
    assert refused.status_code == 400 and garbage.status_code == 400
    assert ok.status_code == 200
    assert states == ("denied", "pending")


async def test_gone_subscriptions_are_pruned_on_404_and_410(tmp_path: Path) -> None:
    """A push service answering 404 or 410 for a subscription makes signoff forget it;
    one answering 201 keeps it."""
    async with pushed(tmp_path) as p:
        keep, keep_id = await p.subscribe("kept")
        await p.subscribe("gone404")
        await p.subscribe("gone410")
        p.push.statuses.update({"gone404": 404, "gone410": 410})
        approval_id = await p.ask()
        await p.message(keep, "kept", approval_id)
        store = p.running.node.store

        async def pruned() -> bool:
            return [s.id for s in await store.push_subscriptions()] == [keep_id]
        await eventually(pruned, what="the gone subscriptions forgotten")
        assert p.push.to("gone404") and p.push.to("gone410")


async def test_step_up_and_other_risks_get_open_only(tmp_path: Path) -> None:
    """A request under step-up (or of a risk class outside webpush.actions_for) is pushed
    with Open only: no token decides it from a notification."""
    async with pushed(tmp_path, step_up=["SEND"]) as p:
        browser, _ = await p.subscribe("phone")
        approval_id = await p.ask()
        message = await p.message(browser, "phone", approval_id)
    assert message["actions"] == [{"action": "open", "title": "Open"}]


async def test_subscriptions_belong_to_their_person(tmp_path: Path) -> None:
    """Only a signed-in approver subscribes (401 without a key, 422 for a bad body, one
    nested too deep included, or a plain-http endpoint when not allowed); DELETE removes
    only one's own."""
    async with pushed(tmp_path) as p:
        _, sub_id = await p.subscribe("phone")
        browser = p.push.subscriber("x")
        anonymous = await p.anonymous.post("/webpush/subscriptions", json=browser.subscription)
        bad = await p.bob.post("/webpush/subscriptions", json={"endpoint": "https://x/y"})
        deep = await p.bob.post("/webpush/subscriptions", content="[" * 2000 + "]" * 2000,
                                headers={"content-type": "application/json"})
        others = await p.admin.delete(f"/webpush/subscriptions/{sub_id}")
        mine = await p.bob.delete(f"/webpush/subscriptions/{sub_id}")
        left = await p.running.node.store.push_subscriptions()
    assert anonymous.status_code == 401
    assert bad.status_code == 422 and "keys" in bad.json()["detail"]
    assert deep.status_code == 422 and "nested" in deep.json()["detail"], deep.text
    assert others.status_code == 404 and mine.status_code == 200
    assert left == []


async def test_a_reminder_notifies_again_with_its_words(tmp_path: Path) -> None:
    """A reminder (a reply naming people under a pending card) pushes the request again,
    its words first, with the same tag (it replaces the notification) and working tokens;
    a note naming nobody (a task's outcome) pushes nothing."""
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        approval_id = await p.ask()
        await p.message(browser, "phone", approval_id)
        surface = p.running.node.surfaces["webpush"]
        ref = next(CardRef(c.surface, c.channel, c.message_id)
                   for c in await p.running.node.store.cards(approval_id)
                   if c.surface == "webpush")
        await surface.notify("", "Task finished", thread=ref)
        await surface.notify("", "⏰ 5m left to decide", thread=ref, mentions=["web:bob"])
        messages = [browser.decrypt(r.body) for r in p.push.to("phone")]
        once = token(messages[-1], "once")
        answer = await p.anonymous.post("/webpush/decide", json={"token": once})
    assert len(messages) == 2
    assert messages[-1]["body"].startswith("⏰ 5m left to decide")
    assert messages[-1]["tag"] == messages[0]["tag"]
    assert answer.status_code == 200


async def test_a_removed_key_loses_its_subscriptions_at_start(tmp_path: Path) -> None:
    """At start-up the daemon forgets the subscriptions of a key no longer configured (or
    made a requester), and a notification already on the phone stops deciding: its Once
    is refused (403, saying why) and the request stays pending."""
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        approval_id = await p.ask()
        once = token(await p.message(browser, "phone", approval_id), "once")
        store = p.running.node.store
        same = make_settings(tmp_path)
        assert await forget_stale_subscriptions(store, same, local=True) == 0
        without_bob = make_settings(tmp_path, api={"key": "admin-key-0123456789abcdef"})
        assert await forget_stale_subscriptions(store, without_bob, local=True) == 1
        assert await store.push_subscriptions() == []
        refused = await p.anonymous.post("/webpush/decide", json={"token": once})
        status = await p.status(approval_id)
    assert refused.status_code == 403 and refused.json()["accepted"] is False
    assert "no longer receives notifications" in refused.json()["message"]
    assert status["status"] == "pending"


async def test_a_token_works_beside_a_console_cookie(tmp_path: Path) -> None:
    """A browser signed in to the console (its cookie sent, no CSRF header) may still post
    a token: the token route needs nobody, so the cookie is ignored there, not refused."""
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        approval_id = await p.ask()
        once = token(await p.message(browser, "phone", approval_id), "once")
        async with p.running.client(key=None) as console:
            signed_in = await console.post("/login", data={"key": BOB_KEY, "next": "/"})
            assert "signoff_session" in console.cookies
            answer = await console.post("/webpush/decide", json={"token": once})
            subscribing = await console.post("/webpush/subscriptions",
                                             json=p.push.subscriber("x").subscription)
    assert signed_in.status_code == 303
    assert answer.status_code == 200, answer.text
    assert subscribing.status_code == 403  # a cookie call to a signed-in route needs the header


PAYMENT = "Please wire 48,500 EUR today to IBAN DE89 3704 0044 0532 0130 00."


async def test_a_transfer_is_pushed_with_its_account_and_amount(tmp_path: Path) -> None:
    """An outside ``bank.transfer`` carries its account and amount in the notification
    that offers Once (they were nowhere in it); its Once approves it."""
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        response = await p.admin.post("/v1/approvals", json={
            "tool": "bank.transfer", "args": {"to_account": "DE89370400440532013000",
                                              "amount_eur": 250000},
            "risk": "SEND", "requester": "hermes:alice@laptop", "policy_id": "s-1"})
        approval_id = str(response.json()["id"])
        message = await p.message(browser, "phone", approval_id)
        answer = await p.anonymous.post("/webpush/decide",
                                        json={"token": token(message, "once")})
    assert "DE89370400440532013000" in message["body"] and "250000" in message["body"]
    assert [a["action"] for a in message["actions"]] == ["once", "deny"]
    assert answer.status_code == 200 and answer.json()["accepted"] is True


async def test_a_request_too_long_to_show_whole_is_denied_here_approved_elsewhere(
        tmp_path: Path) -> None:
    """A requester and policy id of the longest kind do not push the payment line ending
    the body out of the notification, which, too long to show whole, offers Deny and Open
    only. A Once token for it (as a notification sent before this rule carried) is
    refused with the console link; its Deny is taken."""
    body = ("Hi John, here is the report. " * 30)[: 880 - len(PAYMENT)] + PAYMENT
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        response = await p.admin.post("/v1/approvals", json={
            **ASK, "args": {"to": "john@example.com", "subject": "hi", "body": body},
            "requester": "hermes:" + "r" * 190, "policy_id": "p" * 200})
        approval_id = str(response.json()["id"])
        message = await p.message(browser, "phone", approval_id)
        surface = p.running.node.surfaces["webpush"]
        posted = await surface.lookup(approval_id)
        assert posted is not None
        [card_id] = [c.message_id for c in await p.running.node.store.cards(approval_id)
                     if c.surface == "webpush"]
        once = surface.links.sign(posted.card, card_id, Scope.ONCE, "web:bob")
        refused = await p.anonymous.post("/webpush/decide", json={"token": once})
        pending = (await p.status(approval_id))["status"]
        denied = await p.anonymous.post("/webpush/decide",
                                        json={"token": token(message, "deny")})
        status = await p.status(approval_id)
    assert PAYMENT in message["body"] and message["body"].endswith("…")
    assert [a["action"] for a in message["actions"]] == ["deny", "open"]
    assert refused.status_code == 409 and refused.json()["accepted"] is False
    assert refused.json()["message"].startswith("Confirm in the console")
    assert pending == "pending"
    assert denied.status_code == 200 and status["status"] == "denied"


async def test_long_non_ascii_requests_reach_the_phone(tmp_path: Path) -> None:
    """Push services refuse a message over 4,096 bytes (413, the fake too). 900 Cyrillic
    letters arrive whole, with a Once that approves; 900 emoji arrive cut to fit, with
    Deny and Open: each was over 5 KB as \\u escapes, and never arrived."""
    letters = ("Оплатите счёт поставщику до пятницы. " * 30)[:900]
    async with pushed(tmp_path) as p:
        browser, _ = await p.subscribe("phone")
        asked: dict[str, str] = {}
        for name, text in (("cyrillic", letters), ("emoji", "🙂" * 900)):
            response = await p.admin.post("/v1/approvals", json={
                **ASK, "args": {"to": "john@example.com", "subject": "счёт", "body": text}})
            asked[name] = str(response.json()["id"])
        whole = await p.message(browser, "phone", asked["cyrillic"])
        cut = await p.message(browser, "phone", asked["emoji"])
        approved = await p.anonymous.post("/webpush/decide",
                                          json={"token": token(whole, "once")})
        denied = await p.anonymous.post("/webpush/decide", json={"token": token(cut, "deny")})
        states = [(await p.status(asked[name]))["status"] for name in ("cyrillic", "emoji")]
        sizes = [len(r.body) for r in p.push.to("phone")]
    assert p.push.refused == [] and max(sizes) <= 4096
    assert letters in whole["body"] and not whole["body"].endswith("…")
    assert [a["action"] for a in whole["actions"]] == ["once", "deny"]
    assert cut["body"].endswith("🙂…")
    assert [a["action"] for a in cut["actions"]] == ["deny", "open"]
    assert approved.status_code == 200 and denied.status_code == 200
    assert states == ["approved", "denied"]
