"""ntfy as an approval surface: a message per request on one topic, with HTTP buttons.

`post_card` publishes (ntfy's JSON publishing: ``POST <url>`` with ``topic``,
``title``, ``message``, ``priority``, ``tags``, ``click`` and ``actions``) one message,
the card as `bot.cards.notification` writes it (every target, content line and the
preview): for the risk classes in ``actions_for``, Once and Deny are ``http`` actions
POSTing a signed, single-use URL on ``daemon.public_url`` (``/ntfy/decide?token=…``, the
e-mail links' scheme, `bot.links`) bound to the approval, the decision and the topic's
person ``ntfy:<topic>`` (who must be among the approvers) — Once only when the message
shows the whole action uncut (`bot.cards.notification_scopes`), else Deny alone; Open is
a ``view`` action on the console's page. ntfy keeps a message under 4,096 *bytes* (a
longer one becomes an attachment, or is refused where attachments are off), so the text
is cut to `BODY` characters and then until its UTF-8 fits (`fits`): 2,000 Cyrillic
letters are 4,000 bytes, 2,000 emoji 8,000. The priority follows the risk: DESTRUCTIVE 5
(urgent), SEND 4, others 3. ntfy has no edits: when the request is answered, a follow-up
message says how and by whom; an escalation or a reminder publishes the request again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import urlencode

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from signoff.adapters.ntfy.settings import NtfySettings
from signoff.bot.cards import (
    BUTTON_LABELS,
    card_page,
    notification,
    notification_decides,
    notification_scopes,
)
from signoff.bot.links import LinkChecker, LinkKind, decide_by_link, new_card_id
from signoff.bot.ports import (
    ApprovalCard,
    CardLookup,
    CardRef,
    DecidesThroughRoutes,
    DecisionHandler,
    Route,
)
from signoff.errors import PlatformRejected, PlatformUnavailable
from signoff.runtime.clock import Clock
from signoff.runtime.models import JsonDict, RiskClass, Scope

log = logging.getLogger(__name__)

NAME = "ntfy"
LINKS = LinkKind("ntfy-link")
DECIDE_PATH = "/ntfy/decide"
BODY = 2000  # characters of card text a message shows at most
# ntfy reads at most this many bytes of a message and, when it read them all, takes the
# message for an attachment (`util.Peek` says its limit was reached at exactly 4,096).
MESSAGE_BYTES = 4096
PRIORITY: dict[str, int] = {RiskClass.DESTRUCTIVE: 5, RiskClass.SEND: 4}


def fits(title: str, text: str) -> bool:
    """Whether ntfy keeps ``text`` as the message: its UTF-8 under `MESSAGE_BYTES`."""
    return len(text.encode("utf-8", "surrogatepass")) < MESSAGE_BYTES


def card_message(card: ApprovalCard, *, topic: str, urls: dict[Scope, str], open_url: str,
                 note: str | None = None) -> JsonDict:
    """The JSON publish of a request: Once/Deny buttons for ``urls``, then Open."""
    shown = notification(card, note, BODY, fits)
    actions: list[JsonDict] = [
        {"action": "http", "label": BUTTON_LABELS[scope], "url": url, "method": "POST",
         "clear": True} for scope, url in urls.items()]
    actions.append({"action": "view", "label": "Open", "url": open_url})
    return {"topic": topic, "title": shown.title, "message": shown.text,
            "priority": PRIORITY.get(card.risk, 3), "tags": ["lock"], "click": open_url,
            "actions": actions}


def decided_message(card: ApprovalCard, *, topic: str, open_url: str) -> JsonDict:
    """The follow-up once a request is answered: how, by whom (no buttons)."""
    return {"topic": topic, "title": f"Decided: {card.title}"[:200],
            "message": card.outcome or card.status, "priority": 2,
            "tags": ["white_check_mark" if card.status == "approved" else "x"],
            "click": open_url}


class NtfySurface(DecidesThroughRoutes):
    """The ``ntfy`` surface (see the module docstring)."""

    name = NAME
    channel_prefix = None  # one topic: post_message does not target it

    def __init__(self, *, settings: NtfySettings, clock: Clock, lookup: CardLookup,
                 secret: bytes, public_url: str,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self.lookup = lookup
        self.base = public_url.rstrip("/")
        self.actions_for = frozenset(settings.actions_for)
        self.links = LinkChecker(kind=LINKS, surface=NAME, secret=secret, lookup=lookup,
                                 clock=clock)
        headers = {"Authorization": f"Bearer {settings.token}"} if settings.token else {}
        self.http = httpx.AsyncClient(headers=headers, transport=transport,
                                      timeout=settings.timeout.total_seconds())

    @property
    def person(self) -> str:
        """Whom the buttons decide as: the topic's reader, ``ntfy:<topic>``."""
        return f"{NAME}:{self.settings.topic}"

    # -- Surface -----------------------------------------------------------------------
    async def check(self) -> None:
        """Nothing to log in to: the server is reached when a card is published."""

    def routes(self) -> tuple[Route, ...]:
        """The buttons' one route."""
        return (Route("POST", DECIDE_PATH, self.decide),)

    def decides(self, card: ApprovalCard) -> bool:
        """Whether the message of ``card`` offers Once (`bot.ports.ShowsCards`): a token
        for a card it could not show whole is refused by the flow."""
        return notification_decides(card, BODY, self.actions_for, fits)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Publish the request with its buttons."""
        card_id = new_card_id()
        await self._publish(self._card(card, card_id, None))
        return CardRef(surface=NAME, channel=card.approval_id, message_id=card_id)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Answered (or held): a follow-up saying how and by whom. An edit of an open card
        sends nothing: the reply naming people that comes with an escalation does."""
        if card.open:
            return
        await self._publish(decided_message(card, topic=self.settings.topic,
                                            open_url=self._open_url(card)))

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """A reminder or escalation under a pending card publishes it again."""
        if thread is None or not mentions:
            return
        posted = await self.lookup(thread.channel)
        if posted is not None and posted.card.open:
            await self._publish(self._card(posted.card, thread.message_id, text))

    async def run(self, on_decision: DecisionHandler) -> None:
        """Take decisions from the buttons until cancelled."""
        try:
            await self.keep_handler(on_decision)
        finally:
            await self.http.aclose()

    # -- publishing --------------------------------------------------------------------
    def _open_url(self, card: ApprovalCard) -> str:
        return card_page(self.base, card.approval_id) or self.base

    def _card(self, card: ApprovalCard, card_id: str, note: str | None) -> JsonDict:
        urls: dict[Scope, str] = {}
        for scope in notification_scopes(card, note, BODY, self.actions_for, fits):
            token = self.links.sign(card, card_id, scope, self.person)
            urls[scope] = f"{self.base}{DECIDE_PATH}?{urlencode({'token': token})}"
        return card_message(card, topic=self.settings.topic, urls=urls,
                            open_url=self._open_url(card), note=note)

    async def _publish(self, message: JsonDict) -> None:
        try:
            response = await self.http.post(self.settings.url, json=message)
        except httpx.HTTPError as exc:
            raise PlatformUnavailable(f"ntfy: cannot reach {self.settings.url} "
                                      f"({type(exc).__name__})") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise PlatformUnavailable(f"ntfy: {response.status_code} from the server")
        if response.status_code >= 400:
            raise PlatformRejected(f"ntfy: {response.status_code} {response.text[:200]}")

    # -- the buttons' route -------------------------------------------------------------
    async def decide(self, request: Request) -> Response:
        """A button: decide exactly what its token says, as ``ntfy:<topic>``."""
        status, body = await decide_by_link(self.links, self.handler,
                                            request.query_params.get("token", ""))
        return JSONResponse(body, status_code=status)
