"""Delivery failover: a card one surface will never show is announced on the others.

When the outbox gives up posting a card on a surface (it refused the call, failed every
retry, or was disabled), the people who must decide would never know — so, before the
job is given up, every other surface gets a reply under its copy of the card: "Could not
deliver the card for <action> to Slack (<why>); decide here:", mentioning everyone asked
now (approvers, on-call). The card is also marked undelivered in the store, which
``GET /health`` lists under ``"undelivered"`` on every node, until the request is decided
or the card reached that surface after all; the marks that no longer apply are dropped
as they are read.

Both writes are idempotent (the announcement's outbox keys, the mark's primary key), so
the dispatcher may repeat them after a crash between them and the give-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from signoff.bot.cards import describe
from signoff.bot.outbox import undelivered_notes
from signoff.runtime.clock import Clock
from signoff.runtime.models import Approval, ApprovalStatus
from signoff.runtime.store.port import Change, OutboxItem, TaskStore, UndeliveredCard

__all__ = ["Failover", "surface_label"]

log = logging.getLogger(__name__)

People = Callable[[Approval], Iterable[str]]


def surface_label(name: str) -> str:
    """How people call a surface: ``Slack``, ``Telegram``, ``Web``."""
    return name[:1].upper() + name[1:]


@dataclass
class Failover:
    """Announces and records cards given up on one surface."""

    store: TaskStore
    clock: Clock
    surfaces: Callable[[], Iterable[str]]  # the surfaces running now
    people: People  # who is asked now (the authorizer's deciders)

    async def given_up(self, item: OutboxItem, error: str) -> None:
        """The dispatcher's hook: a card post about to be given up is announced and marked;
        any other job (an edit, a reply) is not a missing card."""
        if item.kind != "post" or not item.approval_id:
            return
        approval = await self.store.get_approval(item.approval_id)
        if approval is None or approval.status is not ApprovalStatus.PENDING:
            return  # decided meanwhile: nobody needs the card any more
        now = self.clock.now()
        failed = item.surface
        text = (f"Could not deliver the card for {describe(approval.action)} to "
                f"{surface_label(failed)} ({error}); decide here:")
        people = sorted(set(self.people(approval)))
        notes = undelivered_notes(approval.id, failed, list(self.surfaces()), text, people)
        await self.store.commit(Change(at=now, outbox=notes))
        await self.store.mark_undelivered(UndeliveredCard(approval.id, failed, error, now))
        log.warning("card_undelivered", extra={"approval_id": approval.id, "surface": failed,
                                               "announced_on": len(notes)})

    async def undelivered(self, limit: int = 100) -> list[UndeliveredCard]:
        """The cards still missing on a surface of a pending request (``/health``)."""
        out: list[UndeliveredCard] = []
        for card in await self.store.undelivered(limit=limit):
            approval = await self.store.get_approval(card.approval_id)
            arrived = any(c.surface == card.surface
                          for c in await self.store.cards(card.approval_id))
            if approval is None or approval.status is not ApprovalStatus.PENDING or arrived:
                await self.store.forget_undelivered(card.approval_id, card.surface)
                continue
            out.append(card)
        return out
