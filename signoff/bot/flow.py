"""The approval conversation: one request, every surface, the first valid answer wins.

request (runtime) → card jobs in the outbox → posted on every surface, each post's
CardRef stored → a click/tap/press from any surface → authorization → compare-and-set
decision (runtime) → resume → every copy of the card edited to show the outcome.
Nothing lives only in memory: after a restart the same cards keep working because a
decision needs only the approval id carried by the button.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from signoff.bot.cards import (
    Previewer,
    build_card,
    complete,
    confirm_link,
    preview_for,
    steps_up,
)
from signoff.bot.failover import Failover
from signoff.bot.names import Names
from signoff.bot.notify import Notifier
from signoff.bot.outbox import (
    CardBacklog,
    Delivered,
    Dispatcher,
    post_card,
    thread_reply,
    update_card,
)
from signoff.bot.ports import (
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionOutcome,
    ShowsCards,
    Surface,
)
from signoff.bot.routing.authorizer import TRUSTED_SURFACES, Authorizer
from signoff.runtime.clock import Clock
from signoff.runtime.coalesce import group_size
from signoff.runtime.decisions import Decider
from signoff.runtime.edits import EditRefused, prepare_edit
from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Approval, ApprovalStatus, DecisionCode, RiskClass, Task
from signoff.runtime.outages import Outages
from signoff.runtime.passkeys import NoPasskey, PasskeyRefused, Passkeys
from signoff.runtime.refusals import outcome_words
from signoff.runtime.store.port import CardRecord, Change, OutboxItem, TaskStore
from signoff.runtime.text import shown
from signoff.runtime.tools.base import Preview

log = logging.getLogger(__name__)
PASSKEY_NEEDED = ("Step-up: this request needs a passkey — confirm it in the console "
                  "({link}), or send an assertion made with GET /approvals/<id>/"
                  "passkey-options as \"passkey\"")


@dataclass(frozen=True)
class _Loaded:
    """What a card post needs, read for a whole outbox round at once (`prepare`)."""

    approval: Approval | None
    task: Task | None
    cards: list[CardRecord]


class ApprovalFlow:
    """Connects the runtime's requests and decisions with the chat surfaces.

    It is the engine's listener (cards, notifications) and every surface's decision
    handler (`on_decision`).
    """

    def __init__(self, *, store: TaskStore, decider: Decider, clock: Clock,
                 surfaces: dict[str, Surface], authorizer: Authorizer,
                 notifier: Notifier | None = None, console_url: str | None = None,
                 step_up: frozenset[RiskClass] = frozenset(),
                 previews: Previewer | None = None,
                 delivered: Delivered | None = None, names: Names | None = None,
                 passkeys: Passkeys | None = None, backlog: CardBacklog | None = None,
                 outages: Outages | None = None) -> None:
        self.store = store
        self.decider = decider
        self.clock = clock
        self.surfaces = surfaces
        self.authorizer = authorizer
        # Who is who ([[people]]: one person, several accounts), e.g. whose passkey this is.
        self.people = decider.engine.config.people
        # Cards and lines name people: [[people]] first, then names learned from answers.
        self.names = names or Names(clock, self.people)
        self.notifier = notifier
        self.console_url = console_url
        self.step_up = step_up  # risk classes decided in the console only
        # Set when approvals.step_up_with = "passkey": those requests need an assertion.
        self.passkeys = passkeys
        self.previews = previews  # what a pending card's action will do (a diff, a command)
        self.failover = Failover(store=store, clock=clock, surfaces=lambda: list(surfaces),
                                 people=authorizer.deciders)
        self.dispatcher = Dispatcher(store=store, clock=clock, surfaces=surfaces,
                                     deliver=self.deliver, given_up=self.failover.given_up,
                                     prepare=self.prepare, delivered=delivered,
                                     backlog=backlog, outages=outages)
        self._loaded: dict[str, _Loaded] = {}

    # -- engine listener ---------------------------------------------------------------
    async def approval_requested(self, task: Task | None, approval: Approval) -> None:
        """Cards were queued in the same commit; deliver them now."""
        self.dispatcher.wake()

    async def approval_decided(self, task: Task | None, approval: Approval) -> None:
        """Card edits were queued in the same commit; deliver them now."""
        self.dispatcher.wake()

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """Tell subscribed team channels; reply under the task's cards when it ends."""
        if kind in ("completed", "failed") and task.approval is not None:
            await self._reply_under_cards(kind, task, detail)
        if self.notifier is not None:
            try:
                await self.notifier.task_event(kind, task, detail)
            except Exception:  # a notification must never break the task
                log.exception("notify_failed", extra={"task_id": task.id, "kind": kind})
            # A notifier wired to the outbox wakes it when it writes something (on_flush):
            # waking it on every task event instead cost a look at the outbox per event
            # (on PostgreSQL the outbox reads were a third of the daemon's busy samples).
            if self.notifier.on_flush is None:
                self.dispatcher.wake()

    async def _reply_under_cards(self, kind: str, task: Task, detail: str | None) -> None:
        approval = task.approval
        assert approval is not None
        words = outcome_words(kind, task.result)  # "completed, 1 action refused" too
        text = f"Task {task.id} {words}" + (f": {detail}" if detail and kind == "failed" else "")
        # Queued after the edit of the card: each surface shows the outcome before the reply.
        items = [thread_reply(approval.id, f"thread:{approval.id}:{kind}", text)]
        await self.store.commit(Change(at=self.clock.now(), outbox=items))
        self.dispatcher.wake()

    # -- delivering card jobs ----------------------------------------------------------
    async def prepare(self, items: list[OutboxItem]) -> None:
        """Read what the round's card posts need in two concurrent waves instead of three
        reads per card one after another (on SQLite one hand-over each): a burst of
        requests then costs the outbox one post and its two writes per card."""
        ids = list(dict.fromkeys(str(i.payload.get("approval_id")) for i in items
                                 if i.kind == "post" and i.payload.get("approval_id")))
        approvals, cards = await asyncio.gather(
            asyncio.gather(*(self.store.get_approval(a) for a in ids)),
            asyncio.gather(*(self.store.cards(a) for a in ids)))
        task_ids = {a.task_id for a in approvals if a is not None and a.task_id is not None}
        tasks = dict(zip(task_ids, await asyncio.gather(
            *(self.store.get_task(t) for t in task_ids)), strict=True))
        self._loaded = {
            a: _Loaded(approval, tasks.get(approval.task_id) if approval and approval.task_id
                       else None, list(found))
            for a, approval, found in zip(ids, approvals, cards, strict=True)}

    async def _load(self, approval_id: str, *, fresh: bool) -> _Loaded:
        loaded = None if fresh else self._loaded.get(approval_id)
        if loaded is not None:
            return loaded
        approval = await self.store.get_approval(approval_id)
        task = await self.store.get_task(approval.task_id) if approval and approval.task_id \
            else None
        return _Loaded(approval, task, await self.store.cards(approval_id))

    async def deliver(self, item: OutboxItem, platform: Surface) -> None:
        """Make one outbox job happen on one surface."""
        if item.kind == "notify":
            thread = None
            if item.payload.get("thread") and item.approval_id:
                thread = await self._ref(item.approval_id, platform.name)
                if thread is None:
                    return  # the card never reached this surface: nothing to reply under
            if item.payload.get("pending") and not await self._pending(item.approval_id):
                return  # "your answer is needed", but it was answered meanwhile
            channel = str(item.payload["channel"]) or (thread.channel if thread else "")
            mentions = [str(m) for m in item.payload.get("mentions") or ()]
            # The one door of every notification line (team channels, digests, replies
            # under cards): shown as cards are; the outbox keeps what was written.
            await platform.notify(channel, shown(str(item.payload["text"])),
                                  thread=thread, mentions=mentions)
            return
        approval_id = str(item.payload["approval_id"])
        # A post may use what `prepare` read (a card posted since is in the store, and
        # `post_card` adds it there); edits always read the approval as it is now.
        loaded = await self._load(approval_id, fresh=item.kind != "post" or item.attempts > 0)
        approval, task = loaded.approval, loaded.task
        if approval is None or (approval.task_id is not None and task is None):
            return  # the request is gone (reset): nothing to show
        ref = next((CardRef(r.surface, r.channel, r.message_id) for r in loaded.cards
                    if r.surface == platform.name), None)
        # Every post and edit names who is asked now: the request's own approvers (the
        # on-call at request time and every escalation target), so that an edit for an
        # escalation, a vote or a grouped request never drops the mention of the first.
        asked = [*approval.approvers, *(str(m) for m in item.payload.get("mentions") or ())]
        card = await self.card(task, approval, asked)
        if item.kind == "post":
            if ref is None:
                await post_card(self.store, platform, card, retry=item.attempts > 0)
            return
        if ref is None:
            # Jobs of one surface run in order, so the post was tried first and gave up.
            return
        await update_card(platform, ref, card)

    async def card(self, task: Task | None, approval: Approval,
                   asked: Sequence[str] = ()) -> ApprovalCard:
        """The card of ``approval`` as the surfaces show it now: how many identical requests
        it stands for, the people ``asked`` (besides the request's own approvers), names,
        the preview. One builder for what is posted and for what a click is judged on
        (`_shown_whole`): whether a surface could show a card whole depends on all of it
        (a longer title can push what it approves out of a Discord embed)."""
        identical = 1
        if approval.coalesce_key is not None:  # the card may stand for identical requests
            identical = group_size(approval, await self.store.coalesced(approval.id))
        return build_card(task, approval, console_url=self.console_url,
                          mentions=tuple(dict.fromkeys([*approval.approvers, *asked])),
                          preview=await self.preview(approval), step_up=self.step_up,
                          identical=identical, people=self.names,
                          passkey=self.passkeys is not None)

    async def preview(self, approval: Approval) -> Preview | None:
        """The preview a card of ``approval`` shows now (see `cards.preview_for`)."""
        return await preview_for(self.previews, approval)

    async def _pending(self, approval_id: str | None) -> bool:
        approval = await self.store.get_approval(approval_id) if approval_id else None
        return approval is not None and approval.status is ApprovalStatus.PENDING

    async def _ref(self, approval_id: str, surface: str) -> CardRef | None:
        for record in await self.store.cards(approval_id):
            if record.surface == surface:
                return CardRef(record.surface, record.channel, record.message_id)
        return None

    # -- decisions from surfaces -------------------------------------------------------
    async def on_decision(self, event: DecisionEvent) -> DecisionOutcome:
        """Authorize, then decide; the answer is shown to whoever clicked."""
        actor = event.actor.key
        self.names.learn(actor, event.actor.display)  # shown by name from now on
        approval = await self.store.get_approval(event.approval_id)
        if approval is not None and not self.authorizer.may_decide(actor, approval):
            await self.decider.refuse(approval.id, actor, "not an approver for this request",
                                      channel=event.surface)
            log.info("decision_refused", extra={"approval_id": approval.id, "actor": actor})
            return DecisionOutcome(False, "Not authorized: you are not an approver for this "
                                   "request", code=DecisionCode.NOT_AUTHORIZED)
        stepped = approval is not None and await self._steps_up(approval, event)
        if event.undo:  # who may undo: whoever may decide the request (it only denies)
            result = await self.decider.undo(event.approval_id, actor, channel=event.surface)
        elif approval is not None and self.passkeys is not None and stepped:
            return await self._with_passkey(approval, event, self.passkeys)
        elif approval is not None and event.surface not in TRUSTED_SURFACES and stepped:
            return await self._confirm_in_console(approval, actor, event.surface,
                                                  "step-up: decided in the console only")
        elif (approval is not None and event.typed_in is not None and event.scope.approves
                and approval.status is ApprovalStatus.PENDING
                and not await self._card_in(approval, event.surface, event.typed_in)):
            # An id typed where its card is not (yet) shown was seen whole nowhere there:
            # from a /pending line (a title), another surface, a card the outbox has not
            # delivered. Denying approves nothing, so a typed Deny needs no card.
            return await self._confirm_in_console(
                approval, actor, event.surface,
                "typed approval: its card is not shown where it was typed")
        elif (approval is not None and event.surface not in TRUSTED_SURFACES
                and event.scope.approves and approval.status is ApprovalStatus.PENDING
                and not await self._shown_whole(approval, event.surface)):
            # Only an approval needs the whole action seen: a Deny approves nothing, so a
            # surface that cannot show a card whole may still offer it (ntfy, Discord).
            return await self._confirm_in_console(
                approval, actor, event.surface,
                "too long to show whole there: decided in the console only")
        else:
            result = await self.decider.decide(event.approval_id, event.scope, actor,
                                               reason=event.reason, channel=event.surface,
                                               lasts=event.lasts, args=event.args)
        return DecisionOutcome(result.accepted, result.message, code=result.code)

    async def _steps_up(self, approval: Approval, event: DecisionEvent) -> bool:
        """Whether this answer is under step-up: its request's class is, or the class of
        the action its edited args make is. An edit can make an action riskier (a
        plugin's deploy to prod is DESTRUCTIVE where the one to staging asked was SEND),
        and the answer approves the edit: judged on the request's class alone, a key
        without its person's passkey approved the DESTRUCTIVE edit. An edit the decider
        will refuse anyway is left to it (its words)."""
        if steps_up(approval, self.step_up):
            return True
        if event.args is None or not self.step_up or approval.status is not \
                ApprovalStatus.PENDING:
            return False
        task = await self.store.get_task(approval.task_id) if approval.task_id else None
        try:
            edited = await prepare_edit(self.decider.engine, task, approval, event.args)
        except EditRefused:
            return False
        return edited is not None and (edited.risk or RiskClass.SEND) in self.step_up

    async def _with_passkey(self, approval: Approval, event: DecisionEvent,
                            passkeys: Passkeys) -> DecisionOutcome:
        """A request under passkey step-up: decided only with an assertion made for this
        request, its action and this answer (`signoff.runtime.passkeys`), whatever the
        surface. Chats, e-mail and push cannot carry one: they are sent to the console."""
        actor, surface = event.actor.key, event.surface
        if event.passkey is None and surface not in TRUSTED_SURFACES:
            return await self._confirm_in_console(
                approval, actor, surface, "step-up: confirm with a passkey in the console")
        why: str | None = None
        evidence = None
        code = DecisionCode.PASSKEY
        if event.passkey is None:
            why = "step-up: this request needs a passkey"
            link = confirm_link(self.console_url, approval) or "the console"
            message = PASSKEY_NEEDED.format(link=link)
            if not await passkeys.owned(actor):
                message = f"{message}. {NoPasskey(actor)}"
        elif event.args is not None:
            why = message = "args: a request confirmed with a passkey cannot be edited"
            code = DecisionCode.INVALID
        else:
            try:
                evidence = await passkeys.check(actor, approval, event.scope, event.passkey)
            except PasskeyRefused as exc:
                why = message = str(exc)
        if evidence is None:
            await self.decider.refuse(approval.id, actor, why or message, channel=surface)
            log.info("decision_refused", extra={"approval_id": approval.id, "actor": actor})
            return DecisionOutcome(False, message, code=code)
        result = await self.decider.decide(approval.id, event.scope, actor,
                                           reason=event.reason, channel=surface,
                                           lasts=event.lasts, passkey=evidence)
        return DecisionOutcome(result.accepted, result.message, code=result.code)

    async def _card_in(self, approval: Approval, surface: str, chat: str) -> bool:
        """Whether ``surface`` posted the card of ``approval`` in ``chat`` (a request that
        shares another's card, `coalesce`, is shown on that one)."""
        card = await self._ref(approval.coalesced_into or approval.id, surface)
        return card is not None and card.channel == chat

    async def _shown_whole(self, approval: Approval, surface: str) -> bool:
        """Whether ``surface``'s card of ``approval`` offers approving decisions: it shows
        whole what the decision approves (`cards.complete`, each surface with its own
        limit; its `ShowsCards.decides`), asked of the very card `deliver` shows there."""
        task = await self.store.get_task(approval.task_id) if approval.task_id else None
        card = await self.card(task, approval)  # the card as `deliver` shows it
        platform = self.surfaces.get(surface)
        if isinstance(platform, ShowsCards):
            return platform.decides(card)
        return complete(card, None)

    async def _confirm_in_console(self, approval: Approval, actor: str,
                                  surface: str, why: str) -> DecisionOutcome:
        """A chat answer to a request decided in the console only (step-up, or a card too
        long to show whole there) — an old button, a forged click — decides nothing; the
        person is sent to the console, where a signed-in key decides and everything is
        shown (the trusted surfaces — console, API, terminal — are where a key or the
        node's own terminal already says who answers)."""
        link = confirm_link(self.console_url, approval) or "the signoff console"
        await self.decider.refuse(approval.id, actor, why, channel=surface)
        return DecisionOutcome(False, f"Confirm in the console: {link}",
                               code=DecisionCode.STEP_UP)
