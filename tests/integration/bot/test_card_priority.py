"""Approval cards before autonomous work: while more card jobs are due than the outbox's
limit, the worker claims no more queued tasks (requests made while a round delivers
count too); jobs that only wait for a platform's retry time never hold it back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from signoff.bot.outbox import BACKLOG_LIMIT
from signoff.bot.ports import ApprovalCard, CardRef
from signoff.errors import RateLimited
from signoff.runtime.models import Action, TaskState
from signoff.testing import RecordingSurface
from tests.conftest import NodeFactory

GATED = [Action(tool="run_command", args={"command": "true"})]
AUTONOMOUS = [Action(tool="list_dir", args={"path": "."})]


@dataclass
class SlowSurface(RecordingSurface):
    """Posts wait for `opened` (a platform that is slow right now), or answer 429;
    `posting` is set once a post has begun."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    posting: asyncio.Event = field(default_factory=asyncio.Event)
    rate_limited: bool = False

    async def post_card(self, card: ApprovalCard) -> CardRef:
        if self.rate_limited:
            raise RateLimited("recording: slow down", retry_after=60)
        self.posting.set()
        await self.opened.wait()
        return await super().post_card(card)


# The backlog is of many cards: identical requests each get their own (no coalescing).
SEPARATE = {"approvals": {"coalesce": False}}


async def requests(node: Any, count: int) -> None:
    """``count`` gated tasks, each taken to its approval request by the worker's engine."""
    for n in range(count):
        task = await node.engine.submit(f"gated {n}", steps=GATED, claim=True)
        await node.engine.advance(task)


async def until(check: Any, what: str, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_the_worker_waits_while_cards_are_due_and_goes_on_once_they_are_out(
        node_factory: NodeFactory) -> None:
    """With more card posts due than the limit and the platform slow, a queued autonomous
    task is not started; once the cards are out, it runs."""
    platform = SlowSurface()
    node = await node_factory(SEPARATE, surfaces={"recording": platform})
    await requests(node, BACKLOG_LIMIT + 10)
    background = [asyncio.create_task(node.flow.dispatcher.run()),
                  asyncio.create_task(node.worker.run())]

    async def state(task_id: str) -> TaskState | None:
        task = await node.store.get_task(task_id)
        return task.state if task is not None else None

    try:
        await until(lambda: node.flow.dispatcher.backlog > BACKLOG_LIMIT, "the card backlog")
        queued = await node.engine.submit("autonomous", steps=AUTONOMOUS)
        assert queued is not None
        node.worker.wake()
        await asyncio.sleep(0.3)  # well inside the gate's 1 s: the consumers are waiting
        assert await state(queued.id) is TaskState.QUEUED
        platform.opened.set()
        async with asyncio.timeout(10):
            while await state(queued.id) is not TaskState.COMPLETED:
                await asyncio.sleep(0.02)
        await until(lambda: len(platform.messages) == BACKLOG_LIMIT + 10, "every card")
    finally:
        for job in background:
            job.cancel()
        await asyncio.gather(*background, return_exceptions=True)


async def test_card_jobs_waiting_for_a_rate_limit_do_not_hold_the_worker(
        node_factory: NodeFactory) -> None:
    """A 429 puts every card job off for a minute: none is due, the gate stays open."""
    platform = SlowSurface(rate_limited=True)
    node = await node_factory(SEPARATE, surfaces={"recording": platform})
    await requests(node, BACKLOG_LIMIT + 10)
    await node.flow.dispatcher.run_once()  # the first post answers 429: the rest wait
    await node.flow.dispatcher.run_once()
    assert node.flow.dispatcher.backlog == 0
    await asyncio.wait_for(node.flow.dispatcher.room(), 0.5)


async def test_requests_made_while_a_round_delivers_close_the_gate(
        node_factory: NodeFactory) -> None:
    """One card is being posted (the platform is slow) when more requests than the limit
    come in: the round has not read them, yet the worker waits for them to go out."""
    platform = SlowSurface()
    node = await node_factory(SEPARATE, surfaces={"recording": platform})
    dispatcher = node.flow.dispatcher
    await requests(node, 1)
    delivering = asyncio.create_task(dispatcher.run_once())
    try:
        await asyncio.wait_for(platform.posting.wait(), 10)  # the round read one card
        assert dispatcher.backlog == 1
        await requests(node, BACKLOG_LIMIT + 1)
        assert dispatcher.backlog > BACKLOG_LIMIT
        with pytest.raises(TimeoutError):  # the gate holds (for up to ROOM_WAIT)
            await asyncio.wait_for(dispatcher.room(), 0.3)
        platform.opened.set()
        assert await delivering == 1
        await dispatcher.run_once()  # the next round posts what came in meanwhile
        assert dispatcher.backlog == 0
        assert len(platform.messages) == BACKLOG_LIMIT + 2
    finally:
        platform.opened.set()
        await asyncio.gather(delivering, return_exceptions=True)
