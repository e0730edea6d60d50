"""`TeamsSurface`: approval cards as Adaptive Cards in one Microsoft Teams conversation.

Outbound, cards are posted proactively to the configured conversation through the Bot
Framework connector (``POST {service_url}/v3/conversations/{id}/activities``) and edited
in place (``PUT …/activities/{activity id}``); reminders and escalations are replies to
the card that mention who is asked. Every call carries the bot's token (`auth.BotToken`).
A 429 or a 5xx surfaces as `RateLimited` / `PlatformUnavailable`, so the durable outbox
owns the retry; the connector's other refusals are final (`PlatformRejected`).

Inbound, Teams POSTs activities to the daemon's ``/teams/messages`` with a Bot Framework
JWT (`auth.ActivityVerifier`): a missing, bad or expired token is 401 and nothing is
read. A click (``invoke`` named ``adaptiveCard/action``) from the ``msteams`` channel is
decided through the flow as every surface's is, by ``teams:<aadObjectId>`` (another
channel of the same bot, Web Chat or Direct Line, lets its client write any ``from``: its
clicks decide nothing), and answered with the card as it is now
plus a line for the clicker — a refused or late click gets the card unchanged and why.
Each activity id is recorded in the node's replay ledger: one delivered twice decides once.

HTTP by hand with httpx (see `auth` for why not the Microsoft SDKs).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardLookup,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    Route,
    decide_guarded,
    with_people,
)
from signoff.errors import ConfigError, PlatformRejected, PlatformUnavailable, StoreError
from signoff.runtime.clock import Clock, SystemClock
from signoff.runtime.replay import ReplayLedger

from .auth import ActivityVerifier, BotToken, KeysUnavailable, Unauthenticated, raise_for_status
from .cards import CARD_TYPE, REFRESH_VERB, adaptive_card, attachment, decides, decision_of

log = logging.getLogger(__name__)

SURFACE = "teams"
MAX_ACTIVITY_BYTES = 256 * 1024
ACTIVITY_TTL = timedelta(hours=24)
ACTION_INVOKE = "adaptiveCard/action"
MESSAGE_TYPE = "application/vnd.microsoft.activity.message"
KNOWN_CARDS = 1000  # last rendered cards kept, for answering clicks without a store
KNOWN_PEOPLE = 60  # Teams refreshes a card automatically for at most 60 listed users
UNKNOWN_REQUEST = "Unknown or expired request"
NOT_RUNNING = "Approvals are not being taken right now; try again shortly"
FAILED = "Something went wrong; please try again"
ANONYMOUS = "Cannot tell who clicked: nothing was decided"
OTHER_TENANT = "This card belongs to another organization: nothing was decided"
# The Bot Framework channel of Teams itself. The same bot (and the same signing keys,
# endorsed for every channel) also takes Web Chat and Direct Line, whose clients write
# ``from`` themselves: only Teams vouches for the clicker's aadObjectId.
TEAMS_CHANNEL = "msteams"
OTHER_CHANNEL = "Only a click in Microsoft Teams decides: nothing was decided"


class TeamsSurface:
    """The Microsoft Teams approval surface (a `signoff.bot.ports.Surface`)."""

    name = SURFACE
    channel_prefix = SURFACE

    def __init__(self, *, app_id: str, app_password: str, conversation_id: str,
                 service_url: str, openid_metadata_url: str, token_url: str,
                 tenant_id: str | None = None, clock: Clock | None = None,
                 lookup: CardLookup | None = None,
                 replay: ReplayLedger | None = None, timeout: float = 10.0) -> None:
        """Build the surface; nothing touches the network until the first call.

        ``lookup`` reads a request's card from the store (a click is answered with the
        card as the store has it); ``replay`` remembers the activity ids acted on;
        ``tenant_id``, when given, is the only organization whose clicks decide.
        """
        if not (app_id and app_password and conversation_id):
            raise ConfigError("teams: app_id, app_password and conversation_id are required")
        self.conversation_id = conversation_id
        self._tenant_id = tenant_id
        self._service_url = service_url.rstrip("/")
        self._clock = clock or SystemClock()
        self._http = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self._verifier = ActivityVerifier(app_id=app_id, metadata_url=openid_metadata_url,
                                          clock=self._clock, http=self._http)
        self.token = BotToken(app_id=app_id, app_password=app_password, token_url=token_url,
                              clock=self._clock, http=self._http)
        self._lookup = lookup
        self._replay = replay
        self._on_decision: DecisionHandler | None = None
        self._cards: OrderedDict[str, ApprovalCard] = OrderedDict()
        # aadObjectId -> (MRI "29:…", display name), learned from activities: who gets
        # the automatic refresh, and how a mention is written.
        self._people: OrderedDict[str, tuple[str, str]] = OrderedDict()

    # --- outbound -----------------------------------------------------------------------

    def decides(self, card: ApprovalCard) -> bool:
        """Whether this card offers decisions here (`bot.ports.ShowsCards`)."""
        return decides(card)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Post the card to the conversation; the activity id is its reference."""
        body = {"type": "message", "attachments": [attachment(self._content(card))]}
        answer = await self._call("POST", self._activities(self.conversation_id), body,
                                  call="post card")
        activity_id = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(activity_id, str) or not activity_id:
            raise PlatformUnavailable("teams: the connector answered a post without an id")
        self._remember(card)
        log.info("teams_card_posted approval_id=%s activity_id=%s", card.approval_id,
                 activity_id)
        return CardRef(surface=SURFACE, channel=self.conversation_id, message_id=activity_id)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Replace the card in place (PUT the activity); buttons go once decided."""
        body = {"type": "message", "id": ref.message_id,
                "attachments": [attachment(self._content(card))]}
        await self._call("PUT", self._activities(ref.channel, ref.message_id), body,
                         call="update card")
        self._remember(card)
        log.info("teams_card_updated approval_id=%s activity_id=%s status=%s",
                 card.approval_id, ref.message_id, card.status)

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Post a line to a conversation (``teams:<id>``); under a card it is a reply, and
        each Teams person in ``mentions`` is an ``<at>`` mention (which notifies them)."""
        conversation = channel.removeprefix(f"{SURFACE}:") or (
            thread.channel if thread else self.conversation_id)
        entities: list[dict[str, Any]] = []

        def show(key: str) -> str:
            platform, _, user = key.partition(":")
            if platform != SURFACE or not user:
                return key
            name = self._people.get(user, ("", key))[1]
            entities.append({"type": "mention", "text": f"<at>{name}</at>",
                             "mentioned": {"id": user, "name": name}})
            return f"<at>{name}</at>"

        body: dict[str, Any] = {"type": "message", "textFormat": "plain",
                                "text": with_people(text, mentions, show)}
        if entities:
            body["entities"] = entities
            body["textFormat"] = "xml"  # mentions are read from <at> in xml text only
        reply_to = thread.message_id if thread and thread.channel == conversation else None
        await self._call("POST", self._activities(conversation, reply_to), body,
                         call="notify")

    async def check(self) -> None:
        """Obtain a token: PlatformRejected when the credentials are refused."""
        self.token.forget()  # asked even when one is cached: revoked credentials show here
        await self.token.get()

    async def aclose(self) -> None:
        """Release the HTTP connections."""
        await self._http.aclose()

    # --- inbound ------------------------------------------------------------------------

    async def run(self, on_decision: DecisionHandler) -> None:
        """Take clicks (through `handle_activity`) until cancelled."""
        self._on_decision = on_decision
        log.info("teams_running conversation_id=%s", self.conversation_id)
        try:
            await asyncio.Event().wait()
        finally:
            self._on_decision = None

    def routes(self) -> tuple[Route, ...]:
        """``POST /teams/messages``: the bot's messaging endpoint."""
        return (Route("POST", "/teams/messages", self.handle_activity),)

    async def handle_activity(self, request: Request) -> Response:
        """POST /teams/messages: 401 without a valid token, 503 while the signing keys
        cannot be fetched, 413 over 256 KiB, 400 for a body that is no activity; a card
        click is answered with the card."""
        body = await request.body()
        if len(body) > MAX_ACTIVITY_BYTES:
            return PlainTextResponse("activity too large", status_code=413)
        try:
            activity = json.loads(body)
        except (ValueError, RecursionError):
            activity = None
        if not isinstance(activity, dict):
            return PlainTextResponse("malformed activity", status_code=400)
        try:
            await self._verifier.verify(request.headers.get("authorization"), activity)
        except Unauthenticated as exc:
            log.warning("teams_activity_refused reason=%r", str(exc))
            return PlainTextResponse("unauthorized", status_code=401)
        except KeysUnavailable:  # our side cannot check it now; nothing is read
            return PlainTextResponse("try again", status_code=503,
                                     headers={"Retry-After": "5"})
        self._learn(activity.get("from"))
        # Logged so an operator can read a conversation id here (a message to the bot).
        log.info("teams_activity type=%s conversation_id=%s", activity.get("type"),
                 _field(activity, "conversation", "id"))
        if activity.get("type") != "invoke" or activity.get("name") != ACTION_INVOKE:
            return Response(status_code=200)  # messages, installs: nothing to act on
        return JSONResponse(await self._on_action(activity))

    async def _on_action(self, activity: dict[str, Any]) -> dict[str, Any]:
        """The invoke response to one ``Action.Execute``."""
        value = activity.get("value")
        action = value.get("action") if isinstance(value, dict) else None
        data = action.get("data") if isinstance(action, dict) else None
        if isinstance(action, dict) and action.get("verb") == REFRESH_VERB:
            approval_id = data.get("approval_id") if isinstance(data, dict) else None
            return await self._answer(str(approval_id or ""), None)
        decoded = decision_of(data)
        if decoded is None:
            return _message(UNKNOWN_REQUEST)
        approval_id, scope, undo = decoded
        if not await self._first_time(activity):
            return await self._answer(approval_id, None)  # a redelivery: decided already
        if activity.get("channelId") != TEAMS_CHANNEL:
            # Web Chat, Direct Line, …: a client there names any aadObjectId it likes
            # (Microsoft: "an attacker can impersonate someone else by changing the user
            # ID"), and the bot's token vouches for the channel, not for the person.
            log.warning("teams_click_other_channel approval_id=%s channel=%s", approval_id,
                        activity.get("channelId"))
            return await self._answer(approval_id, OTHER_CHANNEL)
        if not self._our_tenant(activity):
            # A multi-tenant bot installed elsewhere: object ids there are not our people.
            log.warning("teams_click_foreign_tenant approval_id=%s tenant=%s", approval_id,
                        _field(activity, "conversation", "tenantId"))
            return await self._answer(approval_id, OTHER_TENANT)
        aad = _field(activity, "from", "aadObjectId")
        if not aad:
            log.warning("teams_click_anonymous approval_id=%s", approval_id)
            return await self._answer(approval_id, ANONYMOUS)
        conversation = _field(activity, "conversation", "id") or self.conversation_id
        reply_to = activity.get("replyToId")
        ref = CardRef(SURFACE, conversation, reply_to) \
            if isinstance(reply_to, str) and reply_to else None
        event = DecisionEvent(approval_id=approval_id, scope=scope, undo=undo, ref=ref,
                              actor=Actor(SURFACE, aad, display=_field(activity, "from", "name")),
                              surface=SURFACE)
        return await self._answer(approval_id, await self._decide(event))

    def _our_tenant(self, activity: dict[str, Any]) -> bool:
        """True when the activity names our tenant, and no other (Teams names it in
        ``conversation.tenantId`` and ``channelData.tenant.id``). One naming none is not
        ours either: the Bot Framework token signs the service URL, not the body, so a
        body without a tenant could have been written by whoever holds a token."""
        if self._tenant_id is None:
            return True
        data = activity.get("channelData")
        tenant = data.get("tenant") if isinstance(data, dict) else None
        named = {_field(activity, "conversation", "tenantId"),
                 tenant.get("id") if isinstance(tenant, dict) else None} - {None}
        return bool(named) and all(t == self._tenant_id for t in named)

    async def _decide(self, event: DecisionEvent) -> str:
        """The flow's answer for the clicker, whatever happens inside the flow."""
        handler = self._on_decision
        if handler is None:
            return NOT_RUNNING
        return (await decide_guarded(handler, event, "teams", FAILED)).message

    async def _answer(self, approval_id: str, feedback: str | None) -> dict[str, Any]:
        """The card as it is now (the store's, else the last one rendered here), with the
        line for the clicker; only the line when the card is unknown."""
        card = await self._current(approval_id)
        if card is None:
            return _message(feedback or UNKNOWN_REQUEST)
        return {"statusCode": 200, "type": CARD_TYPE,
                "value": adaptive_card(card, refresh_users=self._refresh_users(),
                                       feedback=feedback)}

    async def _current(self, approval_id: str) -> ApprovalCard | None:
        if self._lookup is not None and approval_id:
            try:
                posted = await self._lookup(approval_id)
            except StoreError as exc:
                log.warning("teams_card_lookup_failed approval_id=%s error=%s",
                            approval_id, exc)
                posted = None
            if posted is not None:
                return posted.card
        return self._cards.get(approval_id)

    async def _first_time(self, activity: dict[str, Any]) -> bool:
        activity_id = activity.get("id")
        if self._replay is None:
            return True
        if not isinstance(activity_id, str) or not activity_id:
            # Teams gives every activity an id; one without could be sent again and again
            # with the same token, so it decides nothing.
            log.warning("teams_click_without_id")
            return False
        try:
            return await self._replay.first_time([f"teams:activity:{activity_id}"],
                                                 ttl=ACTIVITY_TTL)
        except StoreError as exc:
            # Unrecorded means possibly acted on twice: decide nothing; the person retries.
            log.warning("teams_activity_dropped activity_id=%s error=%s", activity_id, exc)
            return False

    # --- edge ---------------------------------------------------------------------------

    async def _call(self, method: str, url: str, body: dict[str, Any], *,
                    call: str) -> Any:
        """One connector call with the bot's token; errors as ours."""
        token = await self.token.get()
        try:
            response = await self._http.request(
                method, url, json=body, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            raise PlatformUnavailable(f"teams: {call} failed: {type(exc).__name__}") from exc
        if response.status_code == 401:
            self.token.forget()  # expired or revoked early: the retry fetches a new one
            raise PlatformUnavailable(f"teams: {call} refused the bot's token (401)")
        if response.status_code == 403:
            raise PlatformRejected(f"teams: {call} forbidden (403): is the bot installed in "
                                   f"the conversation? (teams.conversation_id)")
        raise_for_status(response, call)
        try:
            return response.json() if response.content else {}
        except ValueError:
            return {}

    def _activities(self, conversation: str, activity_id: str | None = None) -> str:
        url = f"{self._service_url}/v3/conversations/{quote(conversation, safe='')}/activities"
        return f"{url}/{quote(activity_id, safe='')}" if activity_id else url

    def _content(self, card: ApprovalCard) -> dict[str, Any]:
        return adaptive_card(card, refresh_users=self._refresh_users())

    def _refresh_users(self) -> list[str]:
        return [mri for mri, _ in self._people.values()][-KNOWN_PEOPLE:]

    def _remember(self, card: ApprovalCard) -> None:
        self._cards[card.approval_id] = card
        self._cards.move_to_end(card.approval_id)
        while len(self._cards) > KNOWN_CARDS:
            self._cards.popitem(last=False)

    def _learn(self, sender: object) -> None:
        """Remember a Teams person's MRI and name by their AAD object id."""
        if not isinstance(sender, dict):
            return
        aad, mri, name = sender.get("aadObjectId"), sender.get("id"), sender.get("name")
        if isinstance(aad, str) and aad and isinstance(mri, str) and mri:
            self._people[aad] = (mri, name if isinstance(name, str) and name else aad)
            self._people.move_to_end(aad)
            while len(self._people) > KNOWN_PEOPLE:
                self._people.popitem(last=False)


def _field(activity: dict[str, Any], part: str, key: str) -> str | None:
    """``activity[part][key]`` when it is a non-empty string (a forged body may put
    anything anywhere), else None."""
    holder = activity.get(part)
    value = holder.get(key) if isinstance(holder, dict) else None
    return value if isinstance(value, str) and value else None


def _message(text: str) -> dict[str, Any]:
    """An invoke response that shows ``text`` instead of a card."""
    return {"statusCode": 200, "type": MESSAGE_TYPE, "value": text}
