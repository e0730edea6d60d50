"""The port every approval surface implements, and the neutral values it speaks.

A surface (Slack, Telegram, the web console, the terminal, an in-memory recorder, or one
from another package) turns an `ApprovalCard` into its native message and native clicks
into a `DecisionEvent`. It knows nothing of tasks, stores or policy: the flow
(`bot/flow.py`) owns those.

`Surface` is everything the daemon uses of one; `SurfacePlugin` is how a package offers
one: its name, its ``[<name>]`` config section, its channel prefix and a ``build``. The
plug-ins are found through the entry-point group ``signoff.surfaces``
(`signoff.bot.plugins`), the built-in four exactly like a third party's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from signoff.runtime.clock import Clock
from signoff.runtime.leadership import Leadership, SoleLeadership
from signoff.runtime.models import DecisionCode, JsonDict, Scope
from signoff.runtime.replay import MemoryReplayLedger, ReplayLedger
from signoff.runtime.store.port import PushSubscription
from signoff.runtime.tools.base import Preview

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response


@dataclass(frozen=True)
class Actor:
    """A person (or an automatic rule) on one platform, e.g. ``slack:U123``."""

    platform: str
    user_id: str
    display: str | None = None

    @property
    def key(self) -> str:
        """The `platform:user_id` form used in approver lists and audit events."""
        return f"{self.platform}:{self.user_id}"

    @classmethod
    def parse(cls, key: str, display: str | None = None) -> Actor:
        """Build from ``platform:user_id``."""
        platform, _, user = key.partition(":")
        return cls(platform=platform, user_id=user, display=display)


@dataclass(frozen=True)
class CardRef:
    """Where one copy of a card lives on a surface (enough to edit it later)."""

    surface: str
    channel: str
    message_id: str


@dataclass(frozen=True)
class ApprovalCard:
    """What a card says, as plain data; each surface renders it natively."""

    approval_id: str
    task_id: str | None  # None: a request from an agent that is not ours
    title: str  # the action in plain words
    tool: str
    risk: str
    capability: str
    targets: tuple[str, ...]
    goal: str
    schedule: str | None
    step: int  # 1-based
    steps_total: int
    # Shortened content lines (label, value), then the tool's own description as its
    # server lists it, under `bot.cards.DESCRIBED_LABEL`, when it has one.
    details: tuple[tuple[str, str], ...]
    allowed: tuple[Scope, ...]
    requested_at: datetime
    expires_at: datetime
    status: str = "pending"  # pending | held | approved | denied | expired
    outcome: str | None = None  # "Approved for this session by slack:U1 at 14:03"
    decided_by: str | None = None
    decided_at: datetime | None = None
    note: str | None = None
    why: str | None = None  # the proposer's own words: our agent's turn, or the requester's
    mentions: tuple[str, ...] = ()  # people to alert (escalation), as actor keys
    console_url: str | None = None
    # Step-up (approvals.step_up): decided in the console only; chats show a link to this
    # page (None when the daemon has no public_url) instead of decision buttons.
    step_up: bool = False
    passkey: bool = False  # step-up confirmed with a passkey (approvals.step_up_with)
    confirm_url: str | None = None
    requester: str | None = None  # outside requests: who asks, in its own words
    policy_id: str | None = None  # outside requests: where session/always grants live
    progress: str | None = None  # under a quorum: "1 of 2 approvals (slack:U1)"
    hold_until: datetime | None = None  # held: the action runs then unless undone
    preview: Preview | None = None  # what will happen (a diff, the command), while pending
    identical: int = 1  # how many identical requests this card decides (coalescing)
    # Some approvable content (a message body) was longer than a card carries, so the
    # card shows it cut: no surface with a length limit may offer decisions on it
    # (`bot.cards.complete`).
    cut: bool = False

    @property
    def origin(self) -> str:
        """One line saying where the request comes from, for every surface:
        "Task t-… · step 1 of 2" or "Asked by hermes:alice · policy s-123"."""
        if self.task_id is not None:
            where = f"schedule {self.schedule} · " if self.schedule else ""
            return f"Task {self.task_id} · {where}step {self.step} of {self.steps_total}"
        return f"Asked by {self.requester or 'an outside agent'} · policy {self.policy_id}"

    @property
    def open(self) -> bool:
        """True while buttons should be shown."""
        return self.status == "pending"

    @property
    def held(self) -> bool:
        """True during the undo window: the card shows Undo (and nothing else to press)."""
        return self.status == "held"


@dataclass(frozen=True)
class DecisionEvent:
    """A click, tap, command or console press: somebody answered a card."""

    approval_id: str
    scope: Scope
    actor: Actor
    surface: str
    reason: str | None = None
    ref: CardRef | None = None
    lasts: timedelta | None = None  # "for": a session/always grant lapses after this
    args: JsonDict | None = None  # edited args to approve instead (console and API only)
    undo: bool = False  # the Undo button of a held card (``scope`` is then deny)
    # A typed answer (a text command naming the request's id, no card button): the chat it
    # was typed in. It approves only where this surface showed the request's card, the
    # whole action (`ApprovalFlow.on_decision`); None for a button and for the console.
    typed_in: str | None = None
    # Passkey step-up: the WebAuthn assertion (JSON form) confirming this very answer.
    passkey: JsonDict | None = None


@dataclass(frozen=True)
class DecisionOutcome:
    """What the flow tells the person who answered (a toast, an ephemeral reply)."""

    accepted: bool
    message: str
    code: DecisionCode = DecisionCode.OK


DecisionHandler = Callable[[DecisionEvent], Awaitable[DecisionOutcome]]


def with_people(text: str, mentions: Sequence[str],
                show: Callable[[str], str] = str) -> str:
    """``text`` followed by the people it is meant to reach, each as ``show`` writes them."""
    if not mentions:
        return text
    return f"{text} {', '.join(show(key) for key in mentions)}"


Endpoint = Callable[["Request"], Awaitable["Response"]]
"""An HTTP handler a surface serves (Starlette's request in, response out)."""


class Route(NamedTuple):
    """One HTTP route a surface serves on the daemon's port, e.g. Slack's events.

    The daemon mounts it outside the API key check — the endpoint verifies its caller
    itself (a platform signature, a secret token) — and only under ``/<surface name>/``,
    so that no surface can shadow an API route. A ``signed_in`` route is the opposite: it
    is for people signed in to the console (a key or the console's cookie, with its CSRF
    header), who may decide; the endpoint finds who in ``request.state.caller`` (`Caller`).
    """

    method: str
    path: str
    endpoint: Endpoint
    signed_in: bool = False


@dataclass(frozen=True)
class Caller:
    """Who called a ``signed_in`` surface route: the console's actor (``web:alice``)."""

    actor: str


@runtime_checkable
class Surface(Protocol):
    """An approval surface: everything the daemon uses of one.

    Implementations raise `PlatformUnavailable` or `RateLimited` for retryable failures
    and `PlatformRejected` for final ones; the outbox retries the former.
    """

    name: str

    @property
    def channel_prefix(self) -> str | None:
        """The prefix of its channels in `[[notify]]` and `post_message` (``slack`` for
        ``slack:C123``); None when it has no channels to name (web, terminal)."""
        ...

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Show a new card to the approvers; return where it lives."""
        ...

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Edit a posted card in place (outcome shown, buttons gone once decided)."""
        ...

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Post one line to a channel, or reply under a card when ``thread`` is given.

        ``mentions`` are the people (actor keys) the line must reach: the surface adds
        them to the text in its own form (`with_people`), so that they are notified —
        an edit notifies nobody, a new message that mentions them does. On Slack such a
        thread reply is also shown in the channel.
        """
        ...

    async def run(self, on_decision: DecisionHandler) -> None:
        """Receive decisions until cancelled; call ``on_decision`` for each."""
        ...

    async def check(self) -> None:
        """The start-up check of its credentials (Slack ``auth.test``, Telegram ``getMe``).

        Raise `PlatformRejected` when they are refused (the surface is left out) or a
        retryable `PlatformError` (it is retried with backoff); return when it may run.
        """
        ...

    def routes(self) -> Sequence[Route]:
        """The HTTP routes it serves on the daemon's port (none for most surfaces)."""
        ...


@runtime_checkable
class ShowsCards(Protocol):
    """A surface whose cards may show less than what a decision approves (a chat message
    has a length limit) says on which cards it offers approving decisions (optional). The
    flow refuses Once, Session or Always from it on any other card — a forged click, an
    old button — and sends the person to the console; a Deny approves nothing and is
    taken. Without it, a surface is taken to show a card's texts whole
    (`bot.cards.complete` with no limit)."""

    def decides(self, card: ApprovalCard) -> bool:
        """True when this surface's rendering of ``card`` offers approving buttons: it
        shows everything the decision approves, uncut."""
        ...

class PushSubscriptions(Protocol):
    """Where the browsers' push subscriptions are kept (the store, shared by every node)."""

    async def add_push_subscription(self, sub: PushSubscription) -> PushSubscription:
        """Keep one, replacing a subscription of the same endpoint."""
        ...

    async def push_subscriptions(self, holder: str | None = None) -> list[PushSubscription]:
        """``holder``'s (None: everyone's), oldest first."""
        ...

    async def remove_push_subscription(self, sub_id: str, *, holder: str | None = None
                                       ) -> bool:
        """Forget one (``holder``'s only, when given)."""
        ...


S = TypeVar("S", bound=BaseModel)
PendingLister = Callable[[], Awaitable[list[ApprovalCard]]]


@dataclass(frozen=True)
class PostedCard:
    """An approval's card as it is now, and where its copies were posted."""

    card: ApprovalCard
    refs: tuple[CardRef, ...]


CardLookup = Callable[[str], Awaitable[PostedCard | None]]
"""Approval id -> its `PostedCard` from the store (None: no such request)."""


ANSWER_FAILED = "Sorry, your answer could not be recorded. Please try again."


async def decide_guarded(handler: DecisionHandler, event: DecisionEvent, surface: str,
                         failed: str = ANSWER_FAILED) -> DecisionOutcome:
    """``handler(event)``, logged as ``<surface>_decision``; an exception is logged and
    becomes a refusal saying ``failed`` to the clicker, since a click must still be
    answered and one failing decision must not end a surface's TaskGroup (and every
    other decision in it)."""
    try:
        outcome = await handler(event)
    except Exception:
        _log.exception("%s_decision_failed approval_id=%s actor=%s", surface,
                       event.approval_id, event.actor.key)
        outcome = DecisionOutcome(False, failed, code=DecisionCode.ERROR)
    _log.info("%s_decision approval_id=%s scope=%s actor=%s accepted=%s code=%s", surface,
              event.approval_id, event.scope.value, event.actor.key, outcome.accepted,
              outcome.code)
    return outcome


class DecidesThroughRoutes:
    """For a surface whose answers come in through its own routes (a form, a signed
    link's button, a console post) rather than a connection of its own: all its `run`
    does is keep the daemon's handler, as `handler`, for those routes to call."""

    handler: DecisionHandler | None = None  # None: not running, the routes refuse

    async def keep_handler(self, on_decision: DecisionHandler) -> None:
        """Hold ``on_decision`` as `handler` until cancelled, then let it go."""
        self.handler = on_decision
        try:
            await asyncio.Event().wait()
        finally:
            self.handler = None


async def _no_cards(approval_id: str) -> PostedCard | None:
    return None


@dataclass(frozen=True)
class SurfaceDeps:
    """What the daemon hands a surface it builds, beyond its own config section.

    ``leadership`` and ``replay`` are how a surface behaves as one among several nodes
    on a database: work only one node may do (Telegram's getUpdates) waits for a lease,
    and an inbound request delivered twice (to one node or two) is acted on once. Left
    out, they are those of a single node (always the leader; a per-process ledger).
    """

    clock: Clock
    pending: PendingLister  # the cards still waiting for a decision (Telegram's /pending)
    # One request's card and refs, read from the store (the e-mail links' check): any
    # node of a cluster can answer a link, whichever node sent the mail.
    lookup: CardLookup = _no_cards
    # Where the daemon is reached, for links: daemon.public_url, else its listen address.
    public_url: str | None = None
    leadership: Leadership | None = None
    replay: ReplayLedger | None = None
    # The node's server secret (state_dir/server-secret): keys a surface must not store,
    # such as the e-mail links', are derived from it. Never in a repr.
    secret: bytes = field(default=b"", repr=False)
    # daemon.state_dir, for keys a surface keeps in a file of its own (VAPID); None: none.
    state_dir: Path | None = None
    # The store's push subscriptions, read when a card is posted (after the node is built).
    subscriptions: PushSubscriptions | None = None

    def lead(self) -> Leadership:
        """The node's leadership port (a sole node's when none was given)."""
        return self.leadership or SoleLeadership()

    def ledger(self) -> ReplayLedger:
        """The node's replay ledger (this process's own when none was given)."""
        return self.replay or MemoryReplayLedger(clock=self.clock)


@dataclass(frozen=True)
class SurfacePlugin(Generic[S]):
    """How a package offers a surface: register one under the ``signoff.surfaces`` entry
    point group, named after `name` (see "Writing a surface" in the README).

    The daemon builds the surface when the config file has its ``[<name>]`` section, or
    always when `always` is set; a surface with neither (the terminal) is never built by
    the daemon. The `settings` model must import no SDK: it is loaded with the config.
    """

    name: str
    build: Callable[[S | None, SurfaceDeps], Surface]  # import the SDK here, not at the top
    settings: type[S] | None = None  # the model of its [<name>] section, None: no section
    channel_prefix: str | None = None
    channel_example: str = ""  # for error messages: "'slack:<channel id>' such as 'slack:C123'"
    channel_id: str = r"\S+"  # regex of a channel id, for post_message: "[CGD][A-Z0-9]+"
    channel_kind: str = ""  # what one is: "a conversation id such as 'slack:C0123ABC'"
    user_id: str | None = None  # regex of a user id here, for approver lists; None: none
    approver_example: str = ""  # "'slack:<user id>' such as 'slack:U123'"
    always: bool = False  # built by every daemon, section or not (the web console)
    describe: Callable[[S], str] | None = None  # "socket" for `config check`'s summary
    # A section may switch its surface off (``enabled = false``): then it is not built.
    enabled: Callable[[S], bool] | None = None


@runtime_checkable
class CardFinder(Protocol):
    """A surface that can find the copies of a card it posted (Slack, by message metadata).

    After a post failed ambiguously — the platform may have stored the message anyway —
    the outbox asks before posting again, and adopts what it finds.
    """

    async def find_cards(self, card: ApprovalCard) -> list[CardRef]:
        """Every copy of ``card`` this surface can see, oldest first."""
        ...
