"""Web Push as an approval surface: a card is a notification on each browser that a person
who may decide enabled in the console, an action button a signed decision link.

`post_card` draws a card id (`bot.links.new_card_id`, stored as the card's message id,
with the approval id as its channel) and sends every subscription (`TaskStore`'s push
subscriptions, any node's) its own encrypted message (pywebpush, VAPID): Once and Deny
carry tokens bound to the approval, the decision and the subscription's person
(`bot.links`, the e-mail links' scheme), for the risk classes in ``actions_for`` — Once
only when the notification shows the whole action uncut, else Deny and Open; other
requests carry Open. A push service answering 404 or 410 means the subscription is gone:
it is forgotten. Escalations and reminders (replies naming people) send the notification
again (same tag: it replaces the old one, and alerts); a decision replaces it with the
outcome.

Routes (under ``/webpush/``): ``GET key``, ``POST subscriptions`` and ``DELETE
subscriptions/{id}`` for people signed in to the console (`Route.signed_in`); ``POST
decide`` without the API key — the token is the credential, checked like an e-mail link,
and a stale one (used, answered elsewhere, expired) is refused with a message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Callable, Sequence

import aiohttp
from pywebpush import WebPushException, webpush_async
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from signoff.adapters.webpush import payloads
from signoff.adapters.webpush.settings import WebPushSettings
from signoff.adapters.webpush.vapid import VapidKeys
from signoff.bot.cards import card_page
from signoff.bot.links import LinkChecker, LinkKind, decide_by_link, new_card_id
from signoff.bot.ports import (
    ApprovalCard,
    CardLookup,
    CardRef,
    DecidesThroughRoutes,
    DecisionHandler,
    PushSubscriptions,
    Route,
)
from signoff.errors import PlatformUnavailable
from signoff.runtime.clock import Clock
from signoff.runtime.store.port import PushSubscription

log = logging.getLogger(__name__)

NAME = "webpush"
LINKS = LinkKind("webpush-link")
TTL = 3600  # seconds a push service keeps a message for a device that is offline
MAX_BODY = 4096  # a subscription's JSON, or a decide request's
PER_PERSON = 20  # browsers one person may subscribe
_B64 = re.compile(r"[A-Za-z0-9_-]{16,200}={0,2}")
GONE = (404, 410)


class _Bad(Exception):
    """A request body that is not what the route takes (422, saying what is wrong)."""


async def _json(request: Request) -> dict[str, object]:
    body = await request.body()
    if len(body) > MAX_BODY:
        raise _Bad(f"the body is over {MAX_BODY} bytes")
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise _Bad("the body is not JSON") from exc
    if not isinstance(value, dict):
        raise _Bad("the body must be a JSON object")
    return value


def parse_subscription(value: dict[str, object], *, https_only: bool) -> tuple[str, str, str]:
    """(endpoint, p256dh, auth) of a browser's ``PushSubscription.toJSON()``, or _Bad."""
    endpoint, keys = value.get("endpoint"), value.get("keys")
    if not isinstance(endpoint, str) or not 10 < len(endpoint) <= 2048:
        raise _Bad("endpoint: a URL of at most 2048 characters is required")
    scheme = endpoint.partition("://")[0].lower()
    if scheme != "https" and (https_only or scheme != "http"):
        raise _Bad("endpoint: must be an https URL (a browser's push service)")
    if not isinstance(keys, dict):
        raise _Bad("keys: an object with p256dh and auth is required")
    p256dh, auth = keys.get("p256dh"), keys.get("auth")
    for name, key in (("p256dh", p256dh), ("auth", auth)):
        if not isinstance(key, str) or not _B64.fullmatch(key):
            raise _Bad(f"keys.{name}: base64url text is required")
    return endpoint, str(p256dh), str(auth)


class WebPushSurface(DecidesThroughRoutes):
    """The ``webpush`` surface (see the module docstring)."""

    name = NAME
    channel_prefix = None  # no channels: notes go to no topic

    def __init__(self, *, settings: WebPushSettings, clock: Clock, lookup: CardLookup,
                 secret: bytes, vapid: VapidKeys, subscriptions: PushSubscriptions,
                 public_url: str | None, subject: str) -> None:
        self.settings = settings
        self.clock = clock
        self.lookup = lookup
        self.vapid = vapid
        self.subscriptions = subscriptions
        self.base = (public_url or "").rstrip("/")
        self.subject = subject
        self.actions_for = frozenset(settings.actions_for)
        self.links = LinkChecker(kind=LINKS, surface=NAME, secret=secret, lookup=lookup,
                                 clock=clock)

    # -- Surface -----------------------------------------------------------------------
    async def check(self) -> None:
        """Nothing to log in to: each push service is reached when a card is sent."""

    def routes(self) -> tuple[Route, ...]:
        """The console's subscription routes and the notification actions' one."""
        return (Route("GET", "/webpush/key", self.key, signed_in=True),
                Route("POST", "/webpush/subscriptions", self.subscribe, signed_in=True),
                Route("DELETE", "/webpush/subscriptions/{sub_id}", self.unsubscribe,
                      signed_in=True),
                Route("POST", payloads.DECIDE_PATH, self.decide))

    def decides(self, card: ApprovalCard) -> bool:
        """Whether the notification of ``card`` offers Once (`bot.ports.ShowsCards`): a
        token for a card it could not show whole is refused by the flow."""
        return payloads.offers_decisions(card, self.actions_for)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Notify every subscription (each made by a person who may decide)."""
        card_id = new_card_id()
        await self._push_card(card, card_id, note=None)
        return CardRef(surface=NAME, channel=card.approval_id, message_id=card_id)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Answered (or held): replace the notification with the outcome. An edit of an
        open card (a quorum's progress, an escalation's new names) alerts nobody, as on
        every surface: the reply that comes with an escalation does (`notify`)."""
        if card.open:
            return
        data = payloads.decided_message(card, open_url=self._open_url(card))
        await self._send_all(await self._audience(), lambda _sub: data)

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """A reminder or escalation (a reply naming people) under a pending card: its
        notification again, the reply's words first. Other notes send nothing."""
        if thread is None or not mentions:
            return
        posted = await self.lookup(thread.channel)
        if posted is not None and posted.card.open:
            await self._push_card(posted.card, thread.message_id, note=text)

    async def run(self, on_decision: DecisionHandler) -> None:
        """Take decisions from notification actions until cancelled."""
        await self.keep_handler(on_decision)

    # -- sending -----------------------------------------------------------------------
    def _open_url(self, card: ApprovalCard) -> str:
        return card_page(self.base, card.approval_id) or "/"

    async def _audience(self) -> list[PushSubscription]:
        # Everyone subscribed holds a key that may decide (`subscribe`); who may decide
        # this one (the self-approval rule) is the decider's to say when a token is used.
        return await self.subscriptions.push_subscriptions()

    async def _push_card(self, card: ApprovalCard, card_id: str, note: str | None) -> None:
        offered = payloads.scopes(card, note, self.actions_for)
        open_url = self._open_url(card)

        def data(sub: PushSubscription) -> bytes:
            tokens = {scope: self.links.sign(card, card_id, scope, sub.holder)
                      for scope in offered}
            return payloads.card_message(card, tokens=tokens, base=self.base,
                                         open_url=open_url, note=note)

        await self._send_all(await self._audience(), data)

    async def _send_all(self, subs: list[PushSubscription],
                        data: Callable[[PushSubscription], bytes]) -> None:
        """One push per subscription (``data`` its message); 404/410 forget it; all
        failing is retried by the outbox."""
        if not subs:
            return
        async with aiohttp.ClientSession() as session:
            results = await asyncio.gather(*(self._send(session, s, data(s)) for s in subs))
        for sub, status in zip(subs, results, strict=True):
            if status in GONE:
                await self.subscriptions.remove_push_subscription(sub.id)
                log.info("webpush_subscription_gone", extra={"subscription": sub.id,
                                                             "status": status})
        failed = [s for s in results if s is None or s >= 500]
        if len(failed) == len(subs):
            raise PlatformUnavailable(f"webpush: no push service took the message "
                                      f"({len(subs)} subscriptions)")

    async def _send(self, session: aiohttp.ClientSession, sub: PushSubscription,
                    data: bytes) -> int | None:
        """The push service's status (None: unreachable)."""
        info = {"endpoint": sub.endpoint, "keys": {"p256dh": sub.p256dh, "auth": sub.auth}}
        try:
            response = await webpush_async(
                info, data.decode(), vapid_private_key=self.vapid.signer,
                vapid_claims={"sub": self.subject}, ttl=TTL, timeout=10,
                aiohttp_session=session, headers={"Urgency": "high"})
        except WebPushException as exc:
            status = exc.response.status if exc.response is not None else None  # type: ignore[union-attr]
            log.warning("webpush_refused", extra={"subscription": sub.id, "status": status})
            return int(status) if status is not None else None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("webpush_unreachable", extra={"subscription": sub.id,
                                                      "error": type(exc).__name__})
            return None
        return int(getattr(response, "status", 201))

    # -- routes ------------------------------------------------------------------------
    async def key(self, request: Request) -> Response:
        """The VAPID public key (the browser's ``applicationServerKey``)."""
        return JSONResponse({"public_key": self.vapid.public_key})

    async def subscribe(self, request: Request) -> Response:
        """Keep this browser's subscription for the signed-in person."""
        holder = request.state.caller.actor
        try:
            endpoint, p256dh, auth = parse_subscription(
                await _json(request), https_only=not self.settings.insecure_endpoints)
        except _Bad as bad:
            return JSONResponse({"detail": str(bad)}, status_code=422)
        mine = await self.subscriptions.push_subscriptions(holder)
        if len([s for s in mine if s.endpoint != endpoint]) >= PER_PERSON:
            return JSONResponse({"detail": f"{holder} has {PER_PERSON} subscribed browsers: "
                                           "remove one first"}, status_code=422)
        sub = await self.subscriptions.add_push_subscription(PushSubscription(
            id="ps-" + secrets.token_hex(8), holder=holder, endpoint=endpoint,
            p256dh=p256dh, auth=auth, created_at=self.clock.now()))
        log.info("webpush_subscribed", extra={"subscription": sub.id, "holder": holder})
        return JSONResponse({"id": sub.id, "holder": holder}, status_code=201)

    async def unsubscribe(self, request: Request) -> Response:
        """Forget one of the signed-in person's subscriptions."""
        sub_id = str(request.path_params["sub_id"])
        if not await self.subscriptions.remove_push_subscription(
                sub_id, holder=request.state.caller.actor):
            return JSONResponse({"detail": f"no subscription {sub_id} of yours"},
                                status_code=404)
        return JSONResponse({"id": sub_id, "status": "deleted"})

    async def decide(self, request: Request) -> Response:
        """A notification action: decide exactly what its token says, as its person."""
        try:
            token = str((await _json(request)).get("token") or "")
        except _Bad as bad:
            return JSONResponse({"accepted": False, "message": str(bad)}, status_code=422)
        status, body = await decide_by_link(self.links, self.handler, token,
                                            holder_may=self._still_subscribed)
        return JSONResponse(body, status_code=status)

    async def _still_subscribed(self, holder: str) -> str | None:
        """A token decides only while its holder has a subscription: a start-up forgets
        the subscriptions of people whose key was removed or made a requester (see
        `signoff.wiring.api.forget_stale_subscriptions`), and a notification already on
        their phone must stop deciding with it."""
        if await self.subscriptions.push_subscriptions(holder):
            return None
        log.info("webpush_decision_refused", extra={"holder": holder})
        return (f"{holder} no longer receives notifications here (no subscription, or no "
                f"key that may decide): open the console instead")
