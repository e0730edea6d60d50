"""Card posts of one surface side by side, their platform calls still one at a time, in order.

A card post waits on the store three times (the card's reads, where it was posted, the
job marked done) besides its one platform call; one post after another, a burst's cards
queued behind all of those waits, which grow long while the event loop and the store are
busy with the burst itself. So the dispatcher runs a few consecutive posts of a surface
at once (`WINDOW`), and `Turn` keeps what the platform sees exactly as before: each
post's platform call starts only once the call of the post before it has returned.

If that call failed (a 429, a 5xx, a timeout; a refusal is given up and does not count),
or the post before failed before its call, every later post of the group gives up its
turn untried (`OutOfTurn`): it stays queued, no attempt counted, as when a round stopped
at the first failure before. A post whose card is already posted makes no call and passes
its turn on at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextvars import ContextVar

from signoff.errors import PlatformRejected
from signoff.runtime.store.port import OutboxItem

WINDOW = 4  # consecutive card posts of one surface in flight at once


class OutOfTurn(Exception):
    """The post before this one failed, so this one was not tried (it stays queued)."""


class Turn:
    """One post's place in its surface's order: after ``before``'s platform call."""

    def __init__(self, before: Turn | None) -> None:
        self._before = before
        self._over: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def wait(self) -> None:
        """Return once the post before has made its call; `OutOfTurn` if it failed."""
        if self._before is not None and not await asyncio.shield(self._before._over):
            self.finish(ok=False)
            raise OutOfTurn

    def finish(self, *, ok: bool) -> None:
        """This post's call is over (or it needs none): the next one may go, if ``ok``."""
        if not self._over.done():
            self._over.set_result(ok)


current: ContextVar[Turn | None] = ContextVar("signoff_outbox_turn", default=None)


def groups(items: list[OutboxItem], *, post: str) -> list[list[OutboxItem]]:
    """``items`` in order, consecutive card posts (kind ``post``) up to `WINDOW` together,
    every other job alone (an edit or a reply must find its card posted and stored)."""
    grouped: list[list[OutboxItem]] = []
    for item in items:
        last = grouped[-1] if grouped else None
        if (last is not None and item.kind == post and last[-1].kind == post
                and len(last) < WINDOW):
            last.append(item)
        else:
            grouped.append([item])
    return grouped


def chain(count: int) -> list[Turn]:
    """``count`` turns, each after the one before."""
    turns: list[Turn] = []
    for _ in range(count):
        turns.append(Turn(turns[-1] if turns else None))
    return turns


@contextlib.asynccontextmanager
async def platform_call() -> AsyncIterator[None]:
    """Hold the current job's turn around its platform call (outside a group: no-op)."""
    turn = current.get()
    if turn is None:
        yield
        return
    await turn.wait()
    try:
        yield
    except PlatformRejected:
        turn.finish(ok=True)  # given up, as one after another: the next one goes on
        raise
    except BaseException:
        turn.finish(ok=False)
        raise
    turn.finish(ok=True)
