"""A node that was frozen past its lease acts on nothing it only thought it owned: a task
handed to its worker (just approved there) that another node recovered meanwhile is
re-read and dropped, never run by both; on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Scope, Task, TaskState
from signoff.runtime.worker import Worker
from signoff.wiring import Node
from tests.conftest import NodeFactory
from tests.factories import run_inline, start, webhook
from tests.fakes.http_echo import HttpEcho

LEASE = timedelta(seconds=30)


async def two_nodes(node_factory: NodeFactory, settings_factory: Any, store_url: str,
                    clock: FakeClock) -> tuple[Node, Node]:
    nodes = []
    for name in ("frozen", "other"):
        settings = settings_factory({"daemon": {"node_id": name, "database": store_url,
                                                "lease": "30s"}})
        nodes.append(await node_factory(settings=settings, clock=clock))
    return nodes[0], nodes[1]


async def until(check: Any, what: str) -> None:
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_handed_over_task_recovered_elsewhere_is_dropped_not_run_twice(
        node_factory: NodeFactory, settings_factory: Any, store_url: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Approved on a node whose worker then stalls past the lease: the other node recovers
    the task and runs it; when the stalled worker gets to it, it re-reads it and drops it
    (task_dropped) without touching it: the webhook reached the sink once."""
    clock = FakeClock()
    async with HttpEcho() as echo:
        frozen, other = await two_nodes(node_factory, settings_factory, store_url, clock)
        task = await start(frozen, [webhook(echo.url("/hook"))])
        assert task.approval is not None and task.state is TaskState.WAITING_APPROVAL
        stalled = Worker(engine=frozen.engine, concurrency=1, poll_interval=3600)
        frozen.decider.settler.on_runnable = stalled.hand_over  # its worker is not running yet
        decided = await frozen.decider.decide(task.approval.id, Scope.ONCE, "web:alice",
                                              channel="web")
        assert decided.accepted

        clock.advance(LEASE * 2)  # the frozen node's lease ran out; the other recovers
        run_inline(other)
        [recovered] = await other.engine.recover(include_own=False)
        recovered = await other.engine.advance(recovered)
        assert recovered.state is TaskState.COMPLETED and len(echo.requests) == 1

        caplog.set_level(logging.INFO)
        thawed = asyncio.create_task(stalled.run())
        try:
            await until(lambda: _async(any(r.getMessage() == "task_dropped"
                                           for r in caplog.records)),
                        "the thawed worker to drop the task")
            await stalled.drain()
        finally:
            thawed.cancel()
            await asyncio.gather(thawed, return_exceptions=True)
        messages = [r.getMessage() for r in caplog.records]
        assert "task_changed_elsewhere" not in messages  # dropped before any write
        assert "lease_lost_before_effect" not in messages
        assert len(echo.requests) == 1
        stored = await other.store.get_task(task.id)
        assert stored is not None and stored.state is TaskState.COMPLETED
        assert stored.version == recovered.version  # the thawed node wrote nothing


async def test_a_handed_over_task_still_held_runs(
        node_factory: NodeFactory, settings_factory: Any, store_url: str) -> None:
    """The re-read lets through what the node still holds: approved and handed to a
    worker that is running, the task completes on that node."""
    clock = FakeClock()
    async with HttpEcho() as echo:
        node, _ = await two_nodes(node_factory, settings_factory, store_url, clock)
        task = await start(node, [webhook(echo.url("/hook"))])
        assert task.approval is not None
        worker = Worker(engine=node.engine, concurrency=1, poll_interval=3600)
        node.decider.settler.on_runnable = worker.hand_over
        running = asyncio.create_task(worker.run())
        try:
            assert (await node.decider.decide(task.approval.id, Scope.ONCE, "web:alice",
                                              channel="web")).accepted
            await until(lambda: _state(node, task), "the task to complete")
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        assert len(echo.requests) == 1


async def _state(node: Node, task: Task) -> bool:
    stored = await node.store.get_task(task.id)
    return stored is not None and stored.state is TaskState.COMPLETED


async def _async(value: bool) -> bool:
    return value
