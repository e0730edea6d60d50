"""Concurrent callers sharing one statement: group commit for `PgTaskStore`'s hot path.

A caller adds its item and waits. One statement is on its way at a time; it carries
every item that was waiting when it left (the first caller's own, at low load, so a lone
submission costs what it did alone), and whoever comes meanwhile goes in the next one.
Under load N submissions, claims or saves cost one round trip and one commit instead of
N — measured by bench/cluster.py, the round trips were what grew most of a task's CPU
on both sides (PostgreSQL's backend, and the node's psycopg calls) once two nodes shared
the machine's cores.

No thread and no background task: the caller that finds the statement free runs it
for everyone, inline. A caller cancelled while it waits is left out of the next
statement; if the caller running a statement is cancelled (shutdown), the others get
``interrupted()`` — by default a `StoreError` saying the outcome is unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from signoff.errors import StoreError

In = TypeVar("In")
Out = TypeVar("Out")


INTERRUPTED = ("the statement carrying this write was interrupted (the node is stopping); "
               "whether it was written is unknown")


class Shared(Generic[In, Out]):
    """``await shared(item)`` → that item's result of ``run(items)``, items batched.

    ``run`` gets the items (at most ``limit``, in arrival order) and returns one result
    per item, in the same order; an exception it raises is every item's.
    """

    def __init__(self, run: Callable[[list[In]], Awaitable[list[Out]]], *, limit: int = 64,
                 interrupted: Callable[[], Out] | None = None) -> None:
        self._run = run
        self.limit = limit
        self._interrupted = interrupted
        self._waiting: list[tuple[In, asyncio.Future[Out]]] = []
        self._lock = asyncio.Lock()

    async def __call__(self, item: In) -> Out:
        done: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        try:
            async with self._lock:  # one statement at a time: it serves everyone waiting
                while not done.done():
                    await self._next_statement()
        except asyncio.CancelledError:
            if not done.done():
                done.cancel()  # whichever statement comes next leaves it out
            elif not done.cancelled():
                done.exception()  # read: the interrupted outcome is this caller's to drop
            raise
        return done.result()

    async def _next_statement(self) -> None:
        live = [(item, fut) for item, fut in self._waiting if not fut.done()]
        batch, self._waiting = live[:self.limit], live[self.limit:]
        try:
            results = await self._run([item for item, _ in batch])
        except Exception as exc:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
        except BaseException:
            for _, fut in batch:
                if not fut.done():
                    if self._interrupted is None:
                        fut.set_exception(StoreError(INTERRUPTED))
                    else:
                        fut.set_result(self._interrupted())
            raise
        else:
            for (_, fut), result in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(result)
