"""`DiscordSurface`: approval cards in a Discord channel, decided by their buttons.

REST goes over plain httpx to ``api_base`` (default ``https://discord.com/api/v10``; the
tests' fake in tests), see `rest`. hikari was considered and left out: its REST client
waits out every 429 itself, inside its own buckets, and retries 5xx, so a rate limit
would never reach the durable outbox as `RateLimited` with its delay — the one rule all
surfaces share — and a card could be posted twice behind the outbox's back. The
handful of calls signoff needs (post, edit, reply, ``/users/@me``) are simple JSON.

Clicks arrive at ``POST /discord/interactions`` (the application's Interactions Endpoint
URL), served on the daemon's port by `handle_interaction`:

- every request's Ed25519 signature is checked (`signature`); a missing or bad one, a
  stale timestamp, or an interaction id seen before (the node's replay ledger) is 401 and
  decides nothing;
- PING (type 1) is answered with PONG (type 1);
- a button click (type 3) is decided through the flow like any surface's (which refuses
  an approving click on a card this surface could not show whole, `decides`). Discord wants
  an answer within 3 s: if the decision is done within `answer_within` (2 s) the answer
  is DEFERRED_UPDATE_MESSAGE (type 6; the flow then edits the card on every surface), or,
  for a refusal, a late click or a partial quorum, a message only the clicker sees
  (type 4, flags 64 = ephemeral). A slower decision is answered "thinking" ephemerally
  (type 5) and its outcome edited into that reply when done.

Who clicked is ``discord:<user id>``; the name shown is the member's nick, else their
global display name, else the username.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    DecisionOutcome,
    Route,
    decide_guarded,
)
from signoff.errors import ConfigError, PlatformError, PlatformRejected, StoreError
from signoff.runtime.clock import Clock, SystemClock
from signoff.runtime.models import DecisionCode
from signoff.runtime.replay import ReplayLedger

from .components import (
    SURFACE,
    allowed_mentions,
    card_message,
    decides,
    decode_custom_id,
    escape,
    is_card_of,
    new_card,
    notice,
)
from .rest import DiscordRest
from .signature import SignatureCheck

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
HISTORY_PAGE, HISTORY_PAGES = 100, 3  # how far back a lost card is looked for
SHOWN_MEMORY = 1000  # edits remembered, oldest forgotten first
INTERACTION_TTL = timedelta(minutes=15)  # an interaction token lives 15 minutes
EPHEMERAL = 64
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT = 1, 2, 3
PONG, CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE = 1, 4, 5, 6
UNKNOWN = "Unknown or expired request"
NOT_RUNNING = "Approvals are not being taken right now; try again shortly"
ANONYMOUS = "Cannot tell who clicked: nothing was decided"
NO_COMMANDS = "signoff has no commands here: answer with the buttons on the cards"


def actor_of(interaction: dict[str, Any]) -> Actor | None:
    """Who clicked: ``member.user`` in a server, ``user`` in a DM; None if neither."""
    member = interaction.get("member")
    member = member if isinstance(member, dict) else {}
    user = member.get("user") or interaction.get("user")
    if not isinstance(user, dict) or not str(user.get("id", "")).isdigit():
        return None
    display = member.get("nick") or user.get("global_name") or user.get("username")
    return Actor(SURFACE, str(user["id"]), display=str(display) if display else None)


def ephemeral(text: str) -> JSONResponse:
    """An answer only the clicker sees, pinging nobody."""
    return JSONResponse({"type": CHANNEL_MESSAGE, "data": {
        "content": escape(text)[:2000], "flags": EPHEMERAL,
        "allowed_mentions": allowed_mentions()}})


class DiscordSurface:
    """Approval cards as messages with buttons in one Discord channel (a `Surface`)."""

    name = SURFACE
    channel_prefix = SURFACE

    def __init__(self, *, application_id: str, public_key: str, bot_token: str,
                 channel_id: str, api_base: str = "https://discord.com/api/v10",
                 clock: Clock | None = None, replay: ReplayLedger | None = None,
                 timeout: float = 10.0, answer_within: float = 2.0) -> None:
        """Build the surface; nothing touches the network until the first call."""
        if not bot_token:
            raise ConfigError("discord.bot_token is empty")
        if not channel_id.isdigit() or not application_id.isdigit():
            raise ConfigError("discord.channel_id and discord.application_id are Discord ids "
                              "(digits only)")
        try:
            self._signature = SignatureCheck(public_key)
        except ValueError as exc:
            raise ConfigError("discord.public_key must be 64 hexadecimal characters") from exc
        self.application_id = application_id
        self.channel_id = channel_id
        self._clock: Clock = clock or SystemClock()
        self._replay = replay
        self._answer_within = answer_within
        self._rest = DiscordRest(api_base=api_base, bot_token=bot_token, clock=self._clock,
                                 timeout=timeout)
        self._group: asyncio.TaskGroup | None = None
        self._on_decision: DecisionHandler | None = None
        self.bot_id: str | None = None
        self._shown: dict[tuple[str, str], int] = {}  # message -> the body last edited in

    @property
    def running(self) -> bool:
        """True while `run` is receiving decisions."""
        return self._group is not None

    def decides(self, card: ApprovalCard) -> bool:
        """Whether this card's message offers approving buttons (`bot.ports.ShowsCards`):
        the flow refuses Once, Session or Always clicked on any other."""
        return decides(card)

    # -- outbound -------------------------------------------------------------------------

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Post ``card`` to the approvals channel; the ref holds the channel and message id."""
        message = await self._rest.call("POST", f"/channels/{self.channel_id}/messages",
                                        _body(card, new_card))
        ref = CardRef(SURFACE, str(message.get("channel_id") or self.channel_id),
                      str(message["id"]))
        log.info("discord_card_posted approval_id=%s channel=%s message_id=%s",
                 card.approval_id, ref.channel, ref.message_id)
        return ref

    async def find_cards(self, card: ApprovalCard) -> list[CardRef]:
        """Copies of ``card`` with live buttons among the channel's newest messages,
        oldest first (the outbox asks after a post that failed ambiguously, and after a
        decision). A post retried within minutes is caught by Discord itself (the
        card's enforced nonce); this finds the ones older than that."""
        found: list[CardRef] = []
        before = ""
        for _ in range(HISTORY_PAGES):
            page = await self._rest.call(
                "GET", f"/channels/{self.channel_id}/messages?limit={HISTORY_PAGE}{before}")
            page = page if isinstance(page, list) else []
            found += [CardRef(SURFACE, self.channel_id, str(m["id"])) for m in page
                      if is_card_of(m, card.approval_id, self.bot_id)]
            if len(page) < HISTORY_PAGE:
                break
            before = f"&before={page[-1].get('id')}"
        log.info("discord_card_lookup approval_id=%s copies=%d", card.approval_id, len(found))
        return sorted(found, key=lambda ref: int(ref.message_id))

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Edit the posted card in place: the outcome shown, the buttons gone once decided."""
        if ref.surface != SURFACE:
            raise PlatformRejected(f"discord: cannot edit a card of surface {ref.surface!r}")
        body = _body(card)
        key, shown = (ref.channel, ref.message_id), hash(json.dumps(body, sort_keys=True))
        if self._shown.get(key) == shown:
            # Already edited to exactly this: a retry of a job whose later step failed
            # (the look-up for other copies) need not edit, nor spend a call on it, again.
            return
        await self._rest.call("PATCH", f"/channels/{ref.channel}/messages/{ref.message_id}",
                              body)
        self._shown[key] = shown
        while len(self._shown) > SHOWN_MEMORY:
            self._shown.pop(next(iter(self._shown)))
        log.info("discord_card_updated approval_id=%s channel=%s message_id=%s status=%s",
                 card.approval_id, ref.channel, ref.message_id, card.status)

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Post one line to ``channel`` (``123`` or ``discord:123``), or reply to a card.

        Under a card it is a reply (``message_reference``) in the card's channel, which
        notifies where an edit does not. ``mentions`` follow the text, Discord users as
        ``<@id>`` — the only ones ``allowed_mentions`` lets Discord ping; the text itself
        pings nobody, whatever it says.
        """
        body = notice(text, mentions)
        target = channel.removeprefix(f"{SURFACE}:")
        if thread is not None and thread.surface == SURFACE:
            target = thread.channel
            body["message_reference"] = {"message_id": thread.message_id,
                                         "channel_id": thread.channel,
                                         "fail_if_not_exists": False}
        await self._rest.call("POST", f"/channels/{target}/messages", body)
        log.info("discord_notified channel=%s reply=%s mentions=%d", target,
                 "message_reference" in body, len(mentions))

    async def check(self) -> None:
        """Prove the bot token (``/users/@me``) and that the bot sees the approvals channel."""
        me = await self._rest.call("GET", "/users/@me")
        self.bot_id = str(me.get("id") or "") or None
        await self._rest.call("GET", f"/channels/{self.channel_id}")

    async def aclose(self) -> None:
        """Release the HTTP connections."""
        await self._rest.aclose()

    # -- inbound --------------------------------------------------------------------------

    async def run(self, on_decision: DecisionHandler) -> None:
        """Take clicks (through `handle_interaction`) until cancelled."""
        async with asyncio.TaskGroup() as group:
            self._group, self._on_decision = group, on_decision
            log.info("discord_listening path=/discord/interactions channel=%s",
                     self.channel_id)
            try:
                await asyncio.Event().wait()
            finally:
                self._group, self._on_decision = None, None

    def routes(self) -> tuple[Route, ...]:
        """``POST /discord/interactions``: the application's interactions endpoint."""
        return (Route("POST", "/discord/interactions", self.handle_interaction),)

    async def handle_interaction(self, request: Request) -> Response:
        """Serve ``POST /discord/interactions``: 401 unless signed by Discord, once."""
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return PlainTextResponse("request too large", status_code=413)
        refusal = self._signature.refusal(body, request.headers, self._clock.now())
        if refusal is not None:
            log.warning("discord_request_refused reason=%s", refusal.value)
            return PlainTextResponse("invalid request signature", status_code=401)
        try:
            interaction = json.loads(body)
            kind = interaction["type"] if isinstance(interaction, dict) else None
        except (ValueError, KeyError, RecursionError):
            kind = None
        if not isinstance(kind, int):
            log.warning("discord_request_malformed: a signed body that is no interaction")
            return PlainTextResponse("malformed interaction", status_code=400)
        if kind == PING:
            return JSONResponse({"type": PONG})
        first = await self._first_time(interaction)
        if first is not None:
            return first
        if kind != MESSAGE_COMPONENT:
            return ephemeral(NO_COMMANDS)
        return await self._click(interaction)

    async def _first_time(self, interaction: dict[str, Any]) -> Response | None:
        """None when this interaction is new; else the answer refusing it."""
        if self._replay is None:
            return None
        try:
            new = await self._replay.first_time(
                [f"discord:interaction:{interaction.get('id')}"], ttl=INTERACTION_TTL)
        except StoreError as exc:  # unrecorded, it could be acted on twice
            log.warning("discord_request_deferred reason=replay_ledger error=%s", exc)
            return PlainTextResponse("try again", status_code=503)
        if new:
            return None
        log.warning("discord_request_refused reason=replayed")
        return PlainTextResponse("replayed request", status_code=401)

    async def _click(self, interaction: dict[str, Any]) -> Response:
        data = interaction.get("data")
        decoded = decode_custom_id(data.get("custom_id") if isinstance(data, dict) else None)
        actor = actor_of(interaction)
        if decoded is None or actor is None:
            log.info("discord_click_ignored known=%s sender=%s", decoded is not None,
                     actor is not None)
            return ephemeral(UNKNOWN if decoded is None else ANONYMOUS)
        approval_id, scope, undo = decoded
        group, handler = self._group, self._on_decision
        if group is None or handler is None:
            log.warning("discord_click_not_running approval_id=%s", approval_id)
            return ephemeral(NOT_RUNNING)
        message = interaction.get("message")
        message = message if isinstance(message, dict) else {}
        ref = (CardRef(SURFACE, str(message.get("channel_id") or interaction.get("channel_id")
                                    or self.channel_id), str(message["id"]))
               if message.get("id") else None)
        event = DecisionEvent(approval_id=approval_id, scope=scope, actor=actor,
                              surface=SURFACE, ref=ref, undo=undo)
        try:
            task = group.create_task(self._decide(handler, event))
        except RuntimeError:  # the TaskGroup is shutting down
            return ephemeral(NOT_RUNNING)
        return await self._answer(task, str(interaction.get("token", "")))

    async def _answer(self, task: asyncio.Task[DecisionOutcome], token: str) -> Response:
        """The interaction's answer: the outcome if ready in time, else "thinking"."""
        done, _ = await asyncio.wait({task}, timeout=self._answer_within)
        if done:
            outcome = task.result()
            if _tell(outcome):
                return ephemeral(outcome.message)
            return JSONResponse({"type": DEFERRED_UPDATE})
        task.add_done_callback(lambda t: self._follow_up(t, token))
        return JSONResponse({"type": DEFERRED_CHANNEL_MESSAGE, "data": {"flags": EPHEMERAL}})

    def _follow_up(self, task: asyncio.Task[DecisionOutcome], token: str) -> None:
        group = self._group
        if group is None or task.cancelled():
            return
        try:
            group.create_task(self._edit_reply(token, task.result().message))
        except RuntimeError:
            log.warning("discord_follow_up_dropped_on_shutdown")

    async def _edit_reply(self, token: str, message: str) -> None:
        """Put the outcome into the deferred ephemeral reply (the interaction's webhook)."""
        path = f"/webhooks/{self.application_id}/{token}/messages/@original"
        try:
            await self._rest.call("PATCH", path, {"content": escape(message)[:2000],
                                                  "allowed_mentions": allowed_mentions()})
        except PlatformError as exc:
            log.warning("discord_follow_up_failed error=%s", exc)

    async def _decide(self, handler: DecisionHandler, event: DecisionEvent) -> DecisionOutcome:
        return await decide_guarded(handler, event, "discord")


def _tell(outcome: DecisionOutcome) -> bool:
    """A refusal, a late click and a partial quorum are told to the clicker; a decision
    shows on the card itself."""
    return not outcome.accepted or outcome.code is DecisionCode.PARTIAL


def _body(card: ApprovalCard,
          render: Callable[[ApprovalCard], dict[str, Any]] = card_message) -> dict[str, Any]:
    try:
        return render(card)
    except ValueError as exc:
        raise PlatformRejected(f"discord: cannot post approval {card.approval_id}: {exc}") \
            from exc
