"""Quorum and hold under contention, on a SQLite file and on PostgreSQL.

Partial approvals racing from several nodes are each counted once (none lost, none
twice); an undo in time and the sweeps of other nodes have one outcome.
"""

from __future__ import annotations

import asyncio
from typing import Any

from signoff.runtime import audit
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import ApprovalStatus, Scope, TaskState
from tests.conftest import NodeFactory
from tests.factories import run_inline, start, webhook
from tests.fakes.http_echo import HttpEcho

VOTERS = 6


def hooks(echo: HttpEcho) -> int:
    return sum(1 for r in echo.requests if r.method == "POST" and r.path == "/hook")


async def test_racing_approvals_from_several_nodes_are_all_counted(
        node_factory: NodeFactory, settings_factory: Any, store_url: str) -> None:
    """Six people approve at once on six nodes under a quorum of 6: every approval is
    counted exactly once, the last one decides, the action runs once."""
    async with HttpEcho() as echo:
        nodes = [await node_factory(settings=settings_factory({
            "daemon": {"node_id": f"node-{i}", "database": store_url},
            "policy": {"quorum": {"SEND": VOTERS}}})) for i in range(VOTERS)]
        for node in nodes:
            run_inline(node)
        task = await start(nodes[0], [webhook(echo.url("/hook"))])
        assert task.approval is not None and task.approval.needed == VOTERS
        results = await asyncio.gather(*(
            node.decider.decide(task.approval.id, Scope.ONCE, f"web:voter{i}")
            for i, node in enumerate(nodes)))
        # A lost compare-and-set is retried (a few times): under heavy contention an
        # answer may still be told to try again, but none is ever counted twice or lost.
        retry = [i for i, r in enumerate(results) if not r.accepted]
        for i in retry:
            again = await nodes[i].decider.decide(task.approval.id, Scope.ONCE,
                                                  f"web:voter{i}")
            assert again.accepted, again.message
        store = nodes[0].store
        approval = await store.get_approval(task.approval.id)
        assert approval is not None and approval.status is ApprovalStatus.APPROVED
        assert sorted(v.actor for v in approval.votes) == sorted(
            f"web:voter{i}" for i in range(VOTERS))
        after = await store.get_task(task.id)
        assert after is not None and after.state is TaskState.COMPLETED
        assert hooks(echo) == 1
        events = await store.audit_chain(after=0, limit=1000)
        assert [e.kind for e in events].count("approval_partial") == VOTERS - 1
        assert [e.kind for e in events].count("decision") == 1
        assert (await audit.verify(store)).ok


async def test_an_undo_at_the_end_of_the_window_beats_every_later_sweep(
        node_factory: NodeFactory, settings_factory: Any, store_url: str) -> None:
    """An undo on one node a moment before the window ends, with another node's sweep
    running at the same moment and later: the undo wins, the action never runs."""
    clock = FakeClock()
    async with HttpEcho() as echo:
        nodes = [await node_factory(settings=settings_factory({
            "daemon": {"node_id": f"node-{i}", "database": store_url},
            "approvals": {"hold": {"SEND": "10s"}}}), clock=clock) for i in range(2)]
        for node in nodes:
            run_inline(node)
        task = await start(nodes[0], [webhook(echo.url("/hook"))])
        assert task.approval is not None
        held = await nodes[0].decider.decide(task.approval.id, Scope.ONCE, "web:admin")
        assert held.accepted and held.approval is not None
        assert held.approval.status is ApprovalStatus.HELD
        clock.advance(9.999)
        undone, released = await asyncio.gather(
            nodes[1].decider.undo(task.approval.id, "web:bob"),
            nodes[0].decider.release_due())
        assert released == []  # not due yet: the undo is in time
        assert undone.accepted
        clock.advance(60)
        assert await nodes[0].decider.release_due() == []
        after = await nodes[0].store.get_task(task.id)
        assert after is not None and after.state is TaskState.FAILED
        assert hooks(echo) == 0
