"""`Shared`: concurrent callers share one statement, and each gets its own item's result
(or failure); callers cancelled while waiting are left out."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from signoff.errors import StoreError
from signoff.runtime.store.postgres.shared import Shared


class Statement:
    """A statement's stand-in: records each batch, answers item * 10; while ``held``,
    each statement waits on its own gate (``gates[k]`` for the k-th) to be opened."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gates: list[asyncio.Event] = []
        self.held = False
        self.fail: Exception | None = None

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        gate = asyncio.Event()
        self.gates.append(gate)
        if self.held:
            await gate.wait()
        if self.fail is not None:
            raise self.fail
        return [i * 10 for i in items]

    async def started(self, count: int) -> None:
        while len(self.batches) < count:
            await asyncio.sleep(0)


async def run_held(statement: Statement, calls: list[Coroutine[Any, Any, int]]) -> list[int]:
    """Start every call while the first statement is held on its way, then let it go."""
    statement.held = True
    tasks = [asyncio.create_task(c) for c in calls]
    await statement.started(1)
    await asyncio.sleep(0)  # the others are waiting now
    statement.held = False
    statement.gates[0].set()
    return await asyncio.gather(*tasks)


async def first_held(statement: Statement, shared: Shared[int, int], item: int
                     ) -> asyncio.Task[int]:
    """A caller whose statement is on its way and held there until ``gates[0]`` opens."""
    statement.held = True
    first = asyncio.create_task(shared(item))
    await statement.started(1)
    return first


async def test_callers_arriving_during_a_statement_share_the_next_one() -> None:
    """The first caller goes alone; the nine that came meanwhile share one statement."""
    statement = Statement()
    shared = Shared(statement)
    results = await run_held(statement, [shared(i) for i in range(10)])
    assert results == [i * 10 for i in range(10)]
    assert statement.batches == [[0], list(range(1, 10))]


async def test_a_batch_never_exceeds_the_limit() -> None:
    """Past ``limit`` the waiting callers go in further statements, in arrival order."""
    statement = Statement()
    shared = Shared(statement, limit=3)
    results = await run_held(statement, [shared(i) for i in range(8)])
    assert results == [i * 10 for i in range(8)]
    assert statement.batches == [[0], [1, 2, 3], [4, 5, 6], [7]]


async def test_a_failed_statement_fails_each_of_its_callers_only() -> None:
    """A statement's error is every caller's in it; the next statement starts clean."""
    statement = Statement()
    shared = Shared(statement)
    first = await first_held(statement, shared, 1)
    later = [asyncio.create_task(shared(i)) for i in (2, 3)]
    await asyncio.sleep(0)
    statement.gates[0].set()
    assert await first == 10
    await statement.started(2)
    statement.fail = StoreError("database failed")
    statement.gates[1].set()
    for t in later:
        with pytest.raises(StoreError, match="database failed"):
            await t
    statement.fail, statement.held = None, False
    assert await shared(4) == 40
    assert statement.batches == [[1], [2, 3], [4]]


async def test_a_caller_cancelled_while_waiting_is_left_out() -> None:
    """Cancelled before its statement left, an item is never written."""
    statement = Statement()
    shared = Shared(statement)
    first = await first_held(statement, shared, 1)
    gone, kept = asyncio.create_task(shared(2)), asyncio.create_task(shared(3))
    await asyncio.sleep(0)
    gone.cancel()
    statement.held = False
    statement.gates[0].set()
    assert await first == 10 and await kept == 30
    assert gone.cancelled()
    assert statement.batches == [[1], [3]]


@pytest.mark.parametrize(("interrupted", "outcome"), [(None, StoreError), (lambda: -1, -1)])
async def test_the_others_learn_when_the_caller_running_their_statement_is_cancelled(
        interrupted: object, outcome: object) -> None:
    """The statement's runner cancelled (shutdown): its fellow callers get the
    ``interrupted`` result, by default a StoreError saying the outcome is unknown."""
    statement = Statement()
    shared: Shared[int, int] = Shared(statement, interrupted=interrupted)  # type: ignore[arg-type]
    blocker = await first_held(statement, shared, 0)
    runner = asyncio.create_task(shared(1))  # will run the second one for 1 and 2
    fellow = asyncio.create_task(shared(2))
    await asyncio.sleep(0)
    statement.gates[0].set()
    assert await blocker == 0
    await statement.started(2)  # the second statement is on its way, held
    assert statement.batches[1] == [1, 2]
    runner.cancel()
    if outcome is StoreError:
        with pytest.raises(StoreError, match="unknown"):
            await fellow
    else:
        assert await fellow == outcome
    with pytest.raises(asyncio.CancelledError):
        await runner
