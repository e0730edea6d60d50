"""The approval conversation: one request, every surface, the first valid answer wins.

request (runtime) → card jobs in the outbox → posted on every surface, each post's
CardRef stored → a click/tap/press from any surface → authorization → compare-and-set
decision (runtime) → resume → every copy of the card edited to show the outcome.
Nothing lives only in memory: after a restart the same cards keep working because a
decision needs only the approval id carried by the button.
"""

from __future__ import annotations

import logging

from signoff.bot.cards import Previewer, build_card, preview_for
from signoff.bot.failover import Failover
from signoff.bot.notify import Notifier
from signoff.bot.outbox import Dispatcher, post_card, thread_reply, update_card
from signoff.bot.ports import CardRef, ChatPlatform, DecisionEvent, DecisionOutcome
from signoff.bot.routing.authorizer import Authorizer
from signoff.runtime.clock import Clock
from signoff.runtime.decisions import Decider
from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Approval, ApprovalStatus, DecisionCode, Task
from signoff.runtime.store.port import Change, OutboxItem, TaskStore
from signoff.runtime.text import mask_urls
from signoff.runtime.tools.base import Preview

log = logging.getLogger(__name__)


class ApprovalFlow:
    """Connects the runtime's requests and decisions with the chat surfaces.

    It is the engine's listener (cards, notifications) and every surface's decision
    handler (`on_decision`).
    """

    def __init__(self, *, store: TaskStore, decider: Decider, clock: Clock,
                 platforms: dict[str, ChatPlatform], authorizer: Authorizer,
                 notifier: Notifier | None = None, console_url: str | None = None,
                 previews: Previewer | None = None) -> None:
        self.store = store
        self.decider = decider
        self.clock = clock
        self.platforms = platforms
        self.authorizer = authorizer
        self.notifier = notifier
        self.console_url = console_url
        self.previews = previews  # what a pending card's action will do (a diff, a command)
        self.failover = Failover(store=store, clock=clock, surfaces=lambda: list(platforms),
                                 people=authorizer.deciders)
        self.dispatcher = Dispatcher(store=store, clock=clock, platforms=platforms,
                                     deliver=self.deliver, given_up=self.failover.given_up)

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
        text = f"Task {task.id} {kind}" + (f": {detail}" if detail and kind == "failed" else "")
        # Queued after the edit of the card: each surface shows the outcome before the reply.
        items = [thread_reply(approval.id, f"thread:{approval.id}:{kind}", text)]
        await self.store.commit(Change(at=self.clock.now(), outbox=items))
        self.dispatcher.wake()

    # -- delivering card jobs ----------------------------------------------------------
    async def deliver(self, item: OutboxItem, platform: ChatPlatform) -> None:
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
            # under cards): URLs are masked here, the outbox keeps what was written.
            await platform.notify(channel, mask_urls(str(item.payload["text"])),
                                  thread=thread, mentions=mentions)
            return
        approval_id = str(item.payload["approval_id"])
        approval = await self.store.get_approval(approval_id)
        task = await self.store.get_task(approval.task_id) if approval and approval.task_id \
            else None
        if approval is None or (approval.task_id is not None and task is None):
            return  # the request is gone (reset): nothing to show
        ref = await self._ref(approval_id, platform.name)
        card = build_card(task, approval, console_url=self.console_url,
                          mentions=tuple(item.payload.get("mentions") or ()),
                          preview=await self.preview(approval))
        if item.kind == "post":
            if ref is None:
                await post_card(self.store, platform, card, retry=item.attempts > 0)
            return
        if ref is None:
            # Jobs of one surface run in order, so the post was tried first and gave up.
            return
        await update_card(platform, ref, card)

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
        approval = await self.store.get_approval(event.approval_id)
        if approval is not None and not self.authorizer.may_decide(actor, approval):
            await self.decider.refuse(approval.id, actor, "not an approver for this request",
                                      channel=event.surface)
            log.info("decision_refused", extra={"approval_id": approval.id, "actor": actor})
            return DecisionOutcome(False, "Not authorized: you are not an approver for this "
                                   "request", code=DecisionCode.NOT_AUTHORIZED)
        result = await self.decider.decide(event.approval_id, event.scope, actor,
                                           reason=event.reason, channel=event.surface)
        return DecisionOutcome(result.accepted, result.message, code=result.code)
