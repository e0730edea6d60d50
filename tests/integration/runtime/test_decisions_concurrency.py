"""Exactly once under contention, on a SQLite file and on PostgreSQL.

20 answers racing on one request (from one node, and from 20 nodes sharing the database)
→ exactly one is accepted and the action runs once; workers of several nodes never claim
the same task.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from signoff.bot.ports import ApprovalCard, CardRef
from signoff.runtime import audit
from signoff.runtime.models import Action, RiskClass, Scope, TaskState
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import TaskStore
from signoff.testing import RecordingSurface
from signoff.wiring import Node
from tests.conftest import NodeFactory
from tests.factories import NoopTool, noop, run_inline, start, webhook
from tests.fakes.http_echo import HttpEcho

RACERS = 20
APPROVE = [Scope.ONCE, Scope.SESSION, Scope.ALWAYS]


def hooks(echo: HttpEcho) -> int:
    """How many webhook POSTs the echo server received."""
    return sum(1 for r in echo.requests if r.method == "POST" and r.path == "/hook")


async def _check_one_winner(nodes: list[Node], approval_id: str, echo: HttpEcho,
                            task_id: str) -> None:
    scopes = itertools.cycle(APPROVE)
    results = await asyncio.gather(*(
        node.decider.decide(approval_id, next(scopes), f"web:racer{i}", channel="web")
        for i, node in zip(range(RACERS), itertools.cycle(nodes), strict=False)))
    accepted = [r for r in results if r.accepted]
    assert len(accepted) == 1
    # Every loser is a late answer, however it lost (see also the deterministic
    # tests/unit/runtime/policy/test_grants_decisions.py::test_an_answer_losing_the_race_is_told_already_decided_and_audited)
    losers = [r.code for r in results if not r.accepted]
    assert set(losers) == {"already_decided"}
    store = nodes[0].store
    task = await store.get_task(task_id)
    assert task is not None and task.state is TaskState.COMPLETED
    assert hooks(echo) == 1
    events = await store.audit_chain(after=0, limit=10_000)
    decisions = [e for e in events if e.kind == "decision"]
    refused = [e for e in events if e.kind == "refused"]
    assert len(decisions) == 1 and decisions[0].actor == accepted[0].approval.decided_by  # type: ignore[union-attr]
    assert len(refused) == RACERS - 1
    assert (await audit.verify(store)).ok


async def test_twenty_simultaneous_decisions_on_one_node_accept_exactly_one(
        node_factory: NodeFactory, store_url: str) -> None:
    """20 concurrent decide() calls on one node: one accepted, 19 refused, one webhook POST."""
    async with HttpEcho() as echo:
        node = await node_factory(database=store_url)
        task = await start(node, [webhook(echo.url("/hook"))])
        assert task.approval is not None
        await _check_one_winner([node], task.approval.id, echo, task.id)


async def test_twenty_nodes_deciding_at_once_accept_exactly_one(
        node_factory: NodeFactory, settings_factory: Any, store_url: str) -> None:
    """20 nodes (own store, engine and connection pool each) on one database: one winner."""
    async with HttpEcho() as echo:
        nodes = [await node_factory(settings=settings_factory(
            {"daemon": {"node_id": f"node-{i}", "database": store_url}}))
            for i in range(RACERS)]
        for node in nodes:
            run_inline(node)
        task = await start(nodes[0], [webhook(echo.url("/hook"))])
        assert task.approval is not None
        await _check_one_winner(nodes, task.approval.id, echo, task.id)


async def test_a_decision_racing_the_expiry_has_one_outcome(node_factory: NodeFactory,
                                                            store_url: str) -> None:
    """An approval and the timeout landing together: exactly one of them takes effect."""
    from signoff.runtime.clock import FakeClock

    clock = FakeClock()
    async with HttpEcho() as echo:
        node = await node_factory(database=store_url, clock=clock)
        task = await start(node, [webhook(echo.url("/hook"))])
        assert task.approval is not None
        clock.advance(node.engine.config.approval_timeout)
        decided, expired = await asyncio.gather(
            node.decider.decide(task.approval.id, Scope.ONCE, "web:admin"),
            node.decider.expire_due())
        assert decided.accepted != bool(expired)
        assert hooks(echo) == (1 if decided.accepted else 0)
        after = await node.store.get_task(task.id)
        assert after is not None
        assert after.state is (TaskState.COMPLETED if decided.accepted else TaskState.FAILED)


async def test_several_nodes_expiring_one_request_at_once_apply_one_timeout(
        node_factory: NodeFactory, settings_factory: Any, store_url: str) -> None:
    """Five nodes running expire_due() together: one "expired" event, the task fails once."""
    from signoff.runtime.clock import FakeClock

    clock = FakeClock()
    nodes = [await node_factory(settings=settings_factory(
        {"daemon": {"node_id": f"node-{i}", "database": store_url}}), clock=clock)
        for i in range(5)]
    for node in nodes:
        node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    task = await start(nodes[0], [noop("x", tool="notify_team")])
    clock.advance(nodes[0].engine.config.approval_timeout)
    expired = await asyncio.gather(*(node.decider.expire_due() for node in nodes))
    assert sum(len(found) for found in expired) == 1
    after = await nodes[0].store.get_task(task.id)
    assert after is not None and after.state is TaskState.FAILED
    assert after.result is not None and after.result["reason"] == "approval timed out"
    events = await nodes[0].store.audit_chain(after=0, limit=100)
    assert [e.kind for e in events].count("expired") == 1
    assert (await audit.verify(nodes[0].store)).ok


async def test_two_stores_on_one_database_never_claim_the_same_task(
        node_factory: NodeFactory, store_url: str) -> None:
    """200 queued tasks, two store instances claiming concurrently: disjoint, complete."""
    node = await node_factory(database=store_url)
    node.registry.register(NoopTool())
    ids = set()
    for _ in range(200):
        submitted = await node.engine.submit("queued work", steps=[noop()])
        assert submitted is not None
        ids.add(submitted.id)
    a, b = make_store(store_url), make_store(store_url)
    await a.open()
    await b.open()
    lease = node.engine.clock.now() + timedelta(minutes=5)

    async def claim_all(store: TaskStore, node_id: str) -> list[str]:
        got: list[str] = []
        while True:
            task = await store.claim_next(node_id, lease)
            if task is None:
                counts = await store.count_by_state()
                if not counts.get("queued"):
                    return got
                continue  # lost a race for the row it picked; others remain
            assert task.claimed_by == node_id
            got.append(task.id)

    try:
        first, second = await asyncio.gather(claim_all(a, "node-a"), claim_all(b, "node-b"))
    finally:
        await a.close()
        await b.close()
    assert not set(first) & set(second)
    assert len(first) + len(second) == 200 and set(first) | set(second) == ids


async def test_two_workers_on_one_database_run_every_task_once(
        node_factory: NodeFactory, settings_factory: Any, store_url: str) -> None:
    """Two nodes' real workers drain 100 queued tasks; each task's step runs exactly once."""
    nodes, tools = [], []
    for i in range(2):
        node = await node_factory(settings=settings_factory(
            {"daemon": {"node_id": f"node-{i}", "database": store_url}}))
        tool = NoopTool(name="noop", risk=RiskClass.READ)
        node.registry.register(tool)
        node.worker.poll_interval = 0.02
        nodes.append(node)
        tools.append(tool)
    for _ in range(100):
        await nodes[0].engine.submit("work", steps=[Action(tool="noop", args={"target": "t"})])
    runners = [asyncio.create_task(n.worker.run()) for n in nodes]
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while loop.time() < deadline:
            counts = await nodes[0].store.count_by_state()
            if counts.get("completed", 0) == 100:
                break
            await asyncio.sleep(0.05)
    finally:
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
    assert (await nodes[0].store.count_by_state()) == {"completed": 100}
    assert sum(t.runs for t in tools) == 100


@dataclass
class _SlowPostSurface(RecordingSurface):
    """A RecordingSurface whose post_card takes a while (a real API call does)."""

    posting: asyncio.Event = field(default_factory=asyncio.Event)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Signal that a post started, take 50 ms, then record it."""
        self.posting.set()
        await asyncio.sleep(0.05)
        return await super().post_card(card)


async def test_a_request_made_while_cards_are_being_posted_is_posted_without_waiting_a_poll(
        node_factory: NodeFactory) -> None:
    """A request committed while the outbox dispatcher is mid-round gets its card right after.

    The dispatcher is woken by every request; a wake that lands during a round must not be
    cleared when that round ends, or the card waits for the next poll (``interval``).
    """
    platform = _SlowPostSurface()
    node = await node_factory(store=MemTaskStore(), surfaces={"recording": platform})
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    node.flow.dispatcher.interval = 30.0  # a lost wake-up would wait this long
    dispatcher = asyncio.create_task(node.flow.dispatcher.run())
    try:
        run_inline(node)
        first = await node.engine.submit("one", steps=[noop("a", tool="notify_team")], claim=True)
        assert first is not None
        await node.engine.advance(first)  # wakes the dispatcher: it starts posting card 1
        await asyncio.wait_for(platform.posting.wait(), 5)
        second = await node.engine.submit("two", steps=[noop("b", tool="notify_team")],
                                          claim=True)
        assert second is not None
        await node.engine.advance(second)  # wakes it again, mid-round
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2
        while len(platform.messages) < 2 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert len(platform.messages) == 2, "the second card waited for the next poll"
    finally:
        dispatcher.cancel()
        await asyncio.gather(dispatcher, return_exceptions=True)
