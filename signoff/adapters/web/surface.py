"""The web console as a `Surface`: cards kept in memory, changes pushed to browsers.

The flow posts and edits cards here exactly as on Slack or Telegram; each change is
published to the console's server-sent-event subscribers, whose pages then re-fetch the
cards. The console page itself renders from the store (several daemons may share one
database and only one of them receives a given card), so this memory is a fast path
for live updates, not the source of truth. Clicks arrive as console form posts, which
the HTTP app turns into `DecisionEvent`s for the handler given to `run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from signoff.bot.ports import (
    ApprovalCard,
    CardRef,
    DecidesThroughRoutes,
    DecisionEvent,
    DecisionHandler,
    DecisionOutcome,
    Route,
    with_people,
)

log = logging.getLogger(__name__)

CHANNEL = "console"


@dataclass
class Broadcaster:
    """Fans events out to subscribers through bounded queues; a slow one loses old events.

    Events are hints ("something changed: refresh"), so dropping the oldest when a queue
    is full loses nothing that the next refresh does not bring back.
    """

    queue_size: int = 16
    _subscribers: set[asyncio.Queue[str | None]] = field(default_factory=set)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[str | None]]:
        """A queue of events for one listener (``None`` means: the server is closing)."""
        queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=self.queue_size)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    def publish(self, event: str) -> None:
        """Send ``event`` to every subscriber without waiting."""
        for queue in list(self._subscribers):
            _put_latest(queue, event)

    def close(self) -> None:
        """Tell every current subscriber to stop (their streams end)."""
        for queue in list(self._subscribers):
            _put_latest(queue, None)

    @property
    def count(self) -> int:
        """How many subscribers are listening."""
        return len(self._subscribers)


def _put_latest(queue: asyncio.Queue[str | None], item: str | None) -> None:
    while True:
        try:
            queue.put_nowait(item)
            return
        except asyncio.QueueFull:
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()


class WebSurface(DecidesThroughRoutes):
    """The ``web`` surface: the console at ``/`` and its live updates."""

    name = "web"
    channel_prefix = None  # notes reach the console's list, not a named channel

    def __init__(self, *, max_cards: int = 500, max_notes: int = 200,
                 queue_size: int = 16) -> None:
        self.cards: OrderedDict[str, ApprovalCard] = OrderedDict()
        self.max_cards = max_cards
        self.notes: deque[tuple[str, str, CardRef | None]] = deque(maxlen=max_notes)
        self.feedback: deque[str] = deque(maxlen=max_notes)
        self.broadcaster = Broadcaster(queue_size=queue_size)

    # -- Surface -----------------------------------------------------------------------
    async def check(self) -> None:
        """Nothing to verify: the console is served by this process."""

    def routes(self) -> tuple[Route, ...]:
        """None of its own: the console's pages and forms are the API's (`api.console`)."""
        return ()

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Keep the card and tell the open consoles."""
        self._keep(card)
        self.broadcaster.publish("card")
        return CardRef(surface=self.name, channel=CHANNEL, message_id=card.approval_id)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Replace the card (outcome shown, buttons gone) and tell the open consoles."""
        self._keep(card)
        self.broadcaster.publish("card")

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Keep the note for the console's "notes" list."""
        self.notes.append((channel, with_people(text, mentions), thread))
        self.broadcaster.publish("note")

    async def run(self, on_decision: DecisionHandler) -> None:
        """Take decisions from console posts until cancelled; then close the live streams."""
        try:
            await self.keep_handler(on_decision)
        finally:
            self.broadcaster.close()

    # -- used by the HTTP app ----------------------------------------------------------
    def card(self, approval_id: str) -> ApprovalCard | None:
        """The latest card posted or edited for an approval, if this node has it."""
        return self.cards.get(approval_id)

    async def decide(self, event: DecisionEvent, fallback: DecisionHandler) -> DecisionOutcome:
        """Hand a console click to the running handler (``fallback`` when not running)."""
        handler = self.handler or fallback
        outcome = await handler(event)
        self.feedback.append(outcome.message)
        return outcome

    def _keep(self, card: ApprovalCard) -> None:
        self.cards[card.approval_id] = card
        self.cards.move_to_end(card.approval_id)
        while len(self.cards) > self.max_cards:
            self.cards.popitem(last=False)
