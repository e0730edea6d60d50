"""The ``echo`` surface: a complete signoff surface from another package, for the tests.

Cards and notes are kept in memory and served as JSON; a decision arrives as an HTTP
post. Its routes are served by the daemon without the API key, so each checks the
``X-Echo-Token`` header against ``[echo] token`` itself, as Slack's checks a signature:

    GET  /echo/cards    every card, as the approvers see it now
    GET  /echo/notes    every notification
    POST /echo/decide   {"message_id": "1", "scope": "once", "user": "bob"}

It uses only what signoff offers a plug-in: `signoff.bot.ports`, `signoff.bot.cards`
(the wording every surface shares) and `signoff.sections`.
"""

from __future__ import annotations

import hmac
import itertools
import json
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from signoff.bot.cards import why_line
from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardRef,
    DecidesThroughRoutes,
    DecisionEvent,
    DecisionHandler,
    Route,
    Surface,
    SurfaceDeps,
    SurfacePlugin,
    with_people,
)
from signoff.runtime.models import Scope
from signoff.sections import NonEmpty, Section

NAME = "echo"
TOKEN_HEADER = "X-Echo-Token"


class EchoSettings(Section):
    """[echo]: where cards go, and the token its HTTP callers must show."""

    channel: NonEmpty
    token: NonEmpty


class EchoSurface(DecidesThroughRoutes):
    """Cards in memory, shown and decided over the surface's own HTTP routes."""

    name = NAME
    channel_prefix = NAME

    def __init__(self, *, channel: str, token: str) -> None:
        self.channel = channel
        self._token = token
        self._ids = itertools.count(1)
        self.cards: dict[str, ApprovalCard] = {}
        self.notes: list[dict[str, Any]] = []

    async def post_card(self, card: ApprovalCard) -> CardRef:
        message_id = str(next(self._ids))
        self.cards[message_id] = card
        return CardRef(surface=NAME, channel=self.channel, message_id=message_id)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        self.cards[ref.message_id] = card

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        self.notes.append({"channel": channel, "text": with_people(text, mentions),
                           "thread": thread.message_id if thread else None})

    async def run(self, on_decision: DecisionHandler) -> None:
        await self.keep_handler(on_decision)

    async def check(self) -> None:
        """Nothing remote to verify."""

    def routes(self) -> tuple[Route, ...]:
        return (Route("GET", "/echo/cards", self._cards), Route("GET", "/echo/notes", self._notes),
                Route("POST", "/echo/decide", self._decide))

    def _refused(self, request: Request) -> Response | None:
        given = request.headers.get(TOKEN_HEADER, "")
        if hmac.compare_digest(given.encode(), self._token.encode()):
            return None
        return JSONResponse({"error": "bad or missing token"}, status_code=401)

    async def _cards(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        return JSONResponse([{"message_id": key, "approval_id": card.approval_id,
                              "title": card.title, "why": why_line(card),
                              "status": card.status, "outcome": card.outcome,
                              "buttons": [s.value for s in card.allowed] if card.open else []}
                             for key, card in self.cards.items()])

    async def _notes(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        return JSONResponse(self.notes)

    async def _decide(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        if self.handler is None:  # not running yet: the caller may try again
            return JSONResponse({"error": "not running"}, status_code=503)
        try:
            body = json.loads(await request.body())
            card = self.cards[str(body["message_id"])]
            scope, user = Scope(body["scope"]), str(body["user"])
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": "expected message_id, scope and user"},
                                status_code=400)
        ref = CardRef(surface=NAME, channel=self.channel, message_id=str(body["message_id"]))
        outcome = await self.handler(DecisionEvent(
            approval_id=card.approval_id, scope=scope, actor=Actor(platform=NAME, user_id=user),
            surface=NAME, ref=ref))
        return JSONResponse({"accepted": outcome.accepted, "message": outcome.message})


def build(section: EchoSettings | None, deps: SurfaceDeps) -> Surface:
    """An `EchoSurface` for the ``[echo]`` section."""
    if section is None:
        raise ValueError("echo needs an [echo] section")
    return EchoSurface(channel=section.channel, token=section.token)


PLUGIN = SurfacePlugin(
    name=NAME, build=build, settings=EchoSettings, channel_prefix=NAME,
    channel_example="'echo:<channel>' such as 'echo:team'",
    channel_id=r"[a-z]+", channel_kind="a lowercase name such as 'echo:team'",
    user_id=r"[a-z]+", approver_example="'echo:<name>' such as 'echo:bob'",
    describe=lambda section: f"channel {section.channel}")
