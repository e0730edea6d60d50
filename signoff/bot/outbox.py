"""Delivering platform calls from the durable outbox: retried, ordered, never doubled.

The runtime writes domain events (`ApprovalEvent`: requested, decided, escalated; the
bot's reminders add reminded) to the outbox in the same transaction as the state change;
this dispatcher turns each into the card jobs of every surface (`jobs_for`: a post, an
edit, a reply that notifies — the only place outbox job keys are made besides the
runtime's event keys and team notices) and delivers each with backoff. 429s wait
exactly as long as the platform asked. Items of one surface go out in order (a few
consecutive card posts are delivered side by side, their platform calls still one at a
time in order: `signoff.bot.turns`) and one failing surface never holds up the others.
A card is posted once per (approval, surface): the idempotency key prevents a second
job and the stored CardRef turns a later retry into a no-op; a retry after an ambiguous
failure looks for the card first where the surface can (`post_card`). A job given up
(refused, out of attempts, its surface disabled) is first handed to ``given_up``: the
flow announces a card that will never arrive (`signoff.bot.failover`,
`undelivered_notes`).

Cards come before autonomous work. The dispatcher and the worker share one event loop
and one store; left alone, a burst of gated tasks kept the worker's consumers so busy
that cards went out at a fifth of the rate they reached once the worker was done. So
the worker asks `Dispatcher.room` before it claims another queued task: while the card
backlog is over `BACKLOG_LIMIT`, it waits (at most `ROOM_WAIT` per claim, so that a slow
platform slows autonomous work down but never stops it). The backlog is what a new card
would queue behind: the due, deliverable card jobs (those of an approval) of the round
not yet delivered, on the surface with the most of them (surfaces deliver side by side),
plus every wake-up since the round read the outbox (each one is a job written since,
most often a request's card, that the next round will post). Counting only the round's
own jobs let requests pile up unseen while a round ran: a burst's cards then waited
behind 30 others with a limit of 16. Jobs waiting for a retry or a 429's
``retry_after``, and jobs of a held surface, are not due: a platform's own rate limit
never holds the worker back.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from signoff.bot import turns
from signoff.bot.ports import ApprovalCard, CardFinder, CardRef, Surface
from signoff.errors import PlatformRejected, RateLimited
from signoff.runtime.clock import Clock
from signoff.runtime.events import ApprovalEvent
from signoff.runtime.outages import Backoff, Outages, failing
from signoff.runtime.store.port import CardRecord, Change, OutboxItem, TaskStore

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 15
MAX_BACKOFF = 60.0
FOREVER = datetime(9999, 1, 1, tzinfo=UTC)  # "every undelivered job"
BACKLOG_LIMIT = 4  # card jobs ahead of a new card beyond which the worker waits
ROOM_WAIT = 1.0  # seconds a claim waits for the card backlog at most

CardJob = Callable[[OutboxItem, Surface], Awaitable[None]]
Prepare = Callable[[list[OutboxItem]], Awaitable[None]]
GivenUp = Callable[[OutboxItem, str], Awaitable[None]]  # (job, why): before it is given up
# (approval id, surface, when): a card was posted (telemetry); must not raise.
Delivered = Callable[[str | None, str, datetime], Awaitable[None]]


def backoff(attempts: int) -> float:
    """Seconds to wait after ``attempts`` failures: 0.2, 0.4, 0.8 … capped at a minute."""
    return min(0.2 * (2 ** attempts), MAX_BACKOFF)


class CardBacklog:
    """How many card jobs a new card would wait behind, and the outbox's wake-up.

    Shared by everything around the outbox, so it is made before any of them and each is
    given it at construction: the writers ring it (`ring`: the flow, the notifier, the
    reminders), the dispatcher waits for a ring and counts what its rounds see, and the
    worker waits for `room` before it claims more autonomous work (see the module
    docstring).
    """

    def __init__(self) -> None:
        self.rung = asyncio.Event()
        self.due: dict[str, int] = {}  # surface -> the round's card jobs not yet delivered
        self.unread = 0  # rings since the round read the outbox (see `size`)
        self._drained = asyncio.Event()
        self._drained.set()

    @property
    def size(self) -> int:
        """Card jobs a card requested now would wait behind (see the module docstring)."""
        return max(self.due.values(), default=0) + self.unread

    def ring(self) -> None:
        """Something was written to the outbox: look at it now."""
        self.unread += 1
        self.recount()
        self.rung.set()

    async def room(self) -> None:
        """Return once the card backlog is at most `BACKLOG_LIMIT` (or after `ROOM_WAIT`):
        the worker's priority gate (see the module docstring)."""
        if self.size <= BACKLOG_LIMIT:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ROOM_WAIT):
                await self._drained.wait()

    def read(self, seen: int, due: dict[str, int]) -> None:
        """A round read the outbox: ``due`` card jobs per surface replace the first
        ``seen`` rings (later rings are of jobs the read may have missed)."""
        self.due = due
        self.unread -= seen
        self.recount()

    def delivered(self, surface: str) -> None:
        """One of the round's card jobs on ``surface`` went out."""
        self.due[surface] = self.due.get(surface, 1) - 1
        self.recount()

    def round_over(self) -> None:
        """What the round did not deliver is counted afresh by the next read."""
        self.due = {}
        self.recount()

    def recount(self) -> None:
        """Open or close `room` for the backlog as it is now."""
        if self.size <= BACKLOG_LIMIT:
            self._drained.set()
        else:
            self._drained.clear()


class Dispatcher:
    """Runs the outbox for a set of surfaces."""

    def __init__(self, *, store: TaskStore, clock: Clock, surfaces: dict[str, Surface],
                 deliver: CardJob, interval: float = 0.2,
                 given_up: GivenUp | None = None, prepare: Prepare | None = None,
                 delivered: Delivered | None = None, backlog: CardBacklog | None = None,
                 outages: Outages | None = None) -> None:
        self.store = store
        self.clock = clock
        self.surfaces = surfaces
        self.deliver = deliver
        # Told of each job before it is given up (the flow announces a card that will not
        # arrive); it must be idempotent: a crash before the give-up repeats it.
        self.given_up = given_up
        self.prepare = prepare  # reads for the round's jobs at once (the flow's cache)
        self.delivered = delivered  # told of each card posted (telemetry's card spans)
        self.interval = interval
        self.outages = outages or Outages(clock)  # the daemon's engine's: /health reads it
        self.cards = backlog or CardBacklog()  # shared with the writers and the worker
        self._held: set[str] = set()

    @property
    def backlog(self) -> int:
        """Card jobs a card requested now would wait behind (see the module docstring)."""
        return self.cards.size

    def wake(self) -> None:
        """Look at the outbox now: something was written to it."""
        self.cards.ring()

    async def room(self) -> None:
        """The worker's priority gate (`CardBacklog.room`)."""
        await self.cards.room()

    def hold(self, surface: str) -> None:
        """Leave ``surface``'s jobs waiting, untried, until `release` (it is degraded)."""
        self._held.add(surface)

    def release(self, surface: str) -> None:
        """Deliver ``surface``'s jobs again, starting now."""
        if surface in self._held:
            self._held.discard(surface)
            self.wake()

    async def run(self) -> None:
        """Deliver until cancelled."""
        backoff = Backoff(first=self.interval, maximum=5.0)
        while True:
            # Clear before the round: a wake-up arriving during it must start another.
            self.cards.rung.clear()
            try:
                await self.run_once()
            except Exception as exc:  # the database away (or a bug): wait, never stop
                failing("outbox", exc, self.outages)
                await asyncio.sleep(backoff.next())
                continue
            if self.outages.recovered("outbox"):
                log.warning("outbox_recovered")
            backoff.reset()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self.cards.rung.wait()

    async def run_once(self) -> int:
        """One round over everything undelivered; returns how many items were delivered.

        Each surface's jobs run strictly in order: a job waiting for its retry time holds
        back the later jobs of its surface (so an edit never overtakes its post, and a
        burst arrives in order), but never another surface's. A held surface's jobs wait.
        """
        # The wake-ups so far are of jobs this read sees; later ones, of jobs it may not.
        # They stay counted until the read's own count replaces them (a round's reads
        # take a while, and the gate must not open meanwhile).
        seen = self.cards.unread
        pending = await self._readable(await self.store.due_outbox(FOREVER, limit=1000))
        fanouts = [i for i in pending if i.surface == "*"]
        if fanouts:
            await self._expand(fanouts)
            pending = await self._readable(await self.store.due_outbox(FOREVER, limit=1000))
        now = self.clock.now()
        by_surface: dict[str, list[OutboxItem]] = {}
        held = set(self._held)
        for item in sorted(pending, key=lambda i: i.id):
            if item.surface == "*" or item.surface in held:
                continue
            if item.next_at is not None and item.next_at > now:
                held.add(item.surface)  # its retry time has not come: later ones wait too
                continue
            by_surface.setdefault(item.surface, []).append(item)
        self.cards.read(seen, {name: sum(1 for i in items if i.approval_id)
                               for name, items in by_surface.items()})
        if self.prepare is not None and by_surface:
            await self.prepare([i for items in by_surface.values() for i in items])
        try:
            counts = await asyncio.gather(*(self._surface(name, items)
                                            for name, items in by_surface.items()))
        finally:
            self.cards.round_over()
        return sum(counts)

    async def _readable(self, items: list[OutboxItem]) -> list[OutboxItem]:
        """``items`` without the jobs whose stored payload cannot be read, each given up
        (and its card announced as undelivered): delivering it with a guessed payload
        could show the wrong thing, and failing the round on it held back every job."""
        for item in items:
            if item.unreadable is not None:
                await self._give_up(item, item.unreadable)
        return [item for item in items if item.unreadable is None]

    async def _expand(self, items: list[OutboxItem]) -> None:
        # Every copy and the end of every fan-out job in ONE transaction: a burst of
        # requests costs one commit here, not one per request before any card goes out.
        copies = [job for item in items for name in self.surfaces
                  for job in jobs_for(item, name)]
        await self.store.commit(Change(at=self.clock.now(), outbox=copies,
                                       outbox_done=[item.id for item in items]))

    async def _surface(self, name: str, items: list[OutboxItem]) -> int:
        platform = self.surfaces.get(name)
        items = await self._skip_stale_edits(items)
        delivered = 0
        for group in turns.groups(items, post=Job.POST.value):
            if platform is None:
                for item in group:
                    await self._give_up(item, f"no platform {name}")
                continue
            results = await self._together(group, platform)
            for item, ok in zip(group, results, strict=True):
                if ok and item.approval_id:
                    self.cards.delivered(name)
            delivered += sum(results)
            if not all(results):
                break  # keep this surface's order: later items wait for the failed one
        return delivered

    async def _together(self, group: list[OutboxItem], platform: Surface) -> list[bool]:
        """Deliver ``group`` (one job, or consecutive posts) side by side, each platform
        call in its turn (see `signoff.bot.turns`); every job ends before this returns."""
        if len(group) == 1:
            return [await self._one(group[0], platform)]

        async def in_turn(item: OutboxItem, turn: turns.Turn) -> bool:
            turns.current.set(turn)  # this task's own context
            ok = False
            try:
                ok = await self._one(item, platform)
            finally:
                turn.finish(ok=ok)  # no platform call was needed, or it failed before one
            return ok

        outcomes = await asyncio.gather(
            *(in_turn(item, turn) for item, turn in zip(group, turns.chain(len(group)),
                                                        strict=True)),
            return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome  # a store failure: the round fails, as one after another
        return [bool(outcome) for outcome in outcomes]

    async def _skip_stale_edits(self, items: list[OutboxItem]) -> list[OutboxItem]:
        """Drop an edit directly followed by another edit of the same card: an edit shows
        the card's state when it is made, so the later one shows all the first would
        (a burst of identical requests joining one card makes one edit, not a thousand)."""
        keep: list[OutboxItem] = []
        stale: list[int] = []
        for index, item in enumerate(items):
            after = items[index + 1] if index + 1 < len(items) else None
            if (item.kind == Job.UPDATE and after is not None and after.kind == Job.UPDATE
                    and after.approval_id == item.approval_id and not item.attempts):
                stale.append(item.id)
                continue
            keep.append(item)
        if stale:
            await self.store.commit(Change(at=self.clock.now(), outbox_done=stale))
        return keep

    async def _one(self, item: OutboxItem, platform: Surface) -> bool:
        now = self.clock.now()
        try:
            await self.deliver(item, platform)
        except turns.OutOfTurn:
            return False  # not tried: the post before it failed
        except RateLimited as exc:
            log.info("platform_rate_limited", extra={"surface": platform.name,
                                                     "retry_after": exc.retry_after})
            await self.store.outbox_retry(item.id, error=str(exc),
                                          next_at=now + timedelta(seconds=exc.retry_after))
            return False
        except PlatformRejected as exc:
            log.error("platform_rejected", extra={"surface": platform.name, "error": str(exc)})
            await self._give_up(item, str(exc))
            return True
        except Exception as exc:  # PlatformUnavailable and anything unexpected: retry
            give_up = item.attempts + 1 >= MAX_ATTEMPTS
            log.warning("platform_call_failed", extra={"surface": platform.name,
                                                       "attempts": item.attempts + 1,
                                                       "error": str(exc)})
            error = str(exc) or type(exc).__name__
            if give_up:
                await self._give_up(item, error)
                return False
            await self.store.outbox_retry(
                item.id, error=error, next_at=now + timedelta(seconds=backoff(item.attempts)))
            return False
        await self.store.outbox_done(item.id, now)
        if self.delivered is not None and item.kind == Job.POST.value:
            await self.delivered(item.approval_id, platform.name, now)
        return True

    async def _give_up(self, item: OutboxItem, error: str) -> None:
        # Told first, so that a crash in between repeats the announcement (its keys make
        # that harmless) rather than losing it.
        if self.given_up is not None:
            await self.given_up(item, error)
        await self.store.outbox_retry(item.id, next_at=self.clock.now(), error=error,
                                      give_up=True)


class Job(enum.StrEnum):
    """What one surface is asked to do."""

    POST = "post"  # post the card
    UPDATE = "update"  # edit every copy of the card to its current state
    NOTIFY = "notify"  # a new message: to a channel, or under the card ("thread")


# 0.1 wrote card jobs, not events: rows still queued from before an upgrade mean the same.
_LEGACY = {"post": ApprovalEvent.REQUESTED, "update": ApprovalEvent.DECIDED}


def jobs_for(item: OutboxItem, surface: str) -> list[OutboxItem]:
    """The jobs of ``surface`` for one "*" outbox row, each keyed ``<row key>@<surface>``
    (``…/reply`` for a second job) so a re-expansion after a crash adds nothing."""
    def job(kind: Job, suffix: str = "", **payload: object) -> OutboxItem:
        return OutboxItem(key=f"{item.key}@{surface}{suffix}", surface=surface,
                          kind=kind.value, payload={**item.payload, **payload},
                          approval_id=item.approval_id)

    event = _LEGACY.get(item.kind) or (item.kind if item.kind in set(ApprovalEvent) else None)
    if event == ApprovalEvent.REQUESTED:
        return [job(Job.POST)]
    if event in (ApprovalEvent.DECIDED, ApprovalEvent.VOTED, ApprovalEvent.GROUPED):
        return [job(Job.UPDATE)]  # GROUPED: the count of identical requests changed
    if event == ApprovalEvent.ESCALATED:
        # The edit shows the new approvers; only the reply notifies anyone (edits never do).
        text = (f"No answer after {item.payload.get('waited', '?')}: escalated (level "
                f"{item.payload.get('level', '?')}). Your answer is needed:")
        # ``pending``: the reply is dropped if the request is answered before it goes out.
        return [job(Job.UPDATE), job(Job.NOTIFY, "/reply", channel="", text=text, thread=True,
                                     pending=True, mentions=item.payload.get("approvers", []))]
    if event == ApprovalEvent.REMINDED:
        # Only a reply: the card itself has not changed, and an edit would notify nobody.
        text = (f"Reminder: this request expires in {item.payload.get('left', '?')} "
                f"({item.payload.get('title', 'no answer yet')}). Your answer is needed:")
        return [job(Job.NOTIFY, "/reply", channel="", text=text, thread=True, pending=True,
                    mentions=item.payload.get("mentions", []))]
    return [job(Job(item.kind))]  # a bot job for every surface (a reply under the card)


def thread_reply(approval_id: str, key: str, text: str,
                 mentions: Sequence[str] = ()) -> OutboxItem:
    """A new message under every copy of an approval's card (one ``*`` job per surface).

    Queued after a card edit in the same commit, it arrives after the edit on each
    surface. Edits notify nobody: whatever must reach people (an escalation) is such a
    reply, with ``mentions`` naming them (see `Surface.notify`).
    """
    return OutboxItem(key=key, surface="*", kind="notify", approval_id=approval_id,
                      payload={"channel": "", "text": text, "thread": True,
                               "mentions": list(mentions)})


def undelivered_notes(approval_id: str, failed: str, others: Sequence[str], text: str,
                      mentions: Sequence[str]) -> list[OutboxItem]:
    """A reply under the card on each of ``others`` saying it did not reach ``failed``;
    keyed per (approval, failed surface, other surface), so a repeat adds nothing."""
    return [OutboxItem(key=f"undelivered:{approval_id}:{failed}@{other}", surface=other,
                       kind=Job.NOTIFY.value, approval_id=approval_id,
                       payload={"approval_id": approval_id, "channel": "", "text": text,
                                "thread": True, "pending": True, "mentions": list(mentions)})
            for other in others if other != failed]


async def remember_card(store: TaskStore, approval_id: str, ref: CardRef) -> None:
    """Store where a card was posted (before any update of it is attempted)."""
    await store.save_card(CardRecord(approval_id, ref.surface, ref.channel, ref.message_id))


async def post_card(store: TaskStore, platform: Surface, card: ApprovalCard, *,
                    retry: bool) -> CardRef:
    """Post ``card`` on ``platform`` and store where it went; never a second copy knowingly.

    On a ``retry`` the earlier attempt may have failed after the platform stored the
    message (a 5xx or a timeout tells nothing): a surface that can look (`CardFinder`)
    is asked first, and the oldest copy it finds is adopted instead of posting again.
    """
    # In its turn (`signoff.bot.turns`): the platform sees posts one at a time, in order.
    async with turns.platform_call():
        found = (await platform.find_cards(card) if retry and isinstance(platform, CardFinder)
                 else [])
        ref = found[0] if found else await platform.post_card(card)
    if found:
        log.info("card_adopted", extra={"surface": platform.name, "copies": len(found),
                                        "approval_id": card.approval_id})
    await remember_card(store, card.approval_id, ref)
    return ref


async def update_card(platform: Surface, ref: CardRef, card: ApprovalCard) -> None:
    """Edit the stored copy of ``card``; once decided, every other copy that exists too.

    The store keeps one copy per surface, but an ambiguous post may have left others (a
    retry that did not see the first one). Their buttons would stay live, so a decided
    card is also looked for (`CardFinder`) and each copy found is edited; a copy that can
    no longer be edited does not keep the others from it, and its refusal is raised last.
    """
    await platform.update_card(ref, card)
    if card.open or not isinstance(platform, CardFinder):
        return
    refused: PlatformRejected | None = None
    for other in await platform.find_cards(card):
        if (other.channel, other.message_id) == (ref.channel, ref.message_id):
            continue
        try:
            await platform.update_card(other, card)
        except PlatformRejected as exc:
            refused = refused or exc
    if refused is not None:
        raise refused
