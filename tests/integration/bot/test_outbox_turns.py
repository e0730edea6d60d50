"""Card posts of one surface go out side by side, yet the platform sees them as before:
one call at a time, in request order; a failed post leaves every later one untried."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from signoff.bot.ports import ApprovalCard, CardRef
from signoff.bot.turns import WINDOW
from signoff.errors import PlatformUnavailable, RateLimited
from signoff.runtime.models import Action
from signoff.testing import RecordingSurface
from tests.conftest import NodeFactory

GATED = [Action(tool="run_command", args={"command": "true"})]
SEPARATE = {"approvals": {"coalesce": False}}  # identical requests, a card each


@dataclass
class Watched(RecordingSurface):
    """Records the approval of each post as it starts, and how many overlap; each post
    yields to the loop first (a network call does), and the ``fail`` ones raise."""

    started: list[str] = field(default_factory=list)
    fail: dict[int, Exception] = field(default_factory=dict)  # post number -> raised
    inside: int = 0
    most_inside: int = 0

    async def post_card(self, card: ApprovalCard) -> CardRef:
        self.started.append(card.approval_id)
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            failure = self.fail.pop(len(self.started), None)
            if failure is not None:
                raise failure
            return await super().post_card(card)
        finally:
            self.inside -= 1


async def requests(node: Any, count: int) -> list[str]:
    """``count`` gated tasks taken to their approval requests; their approval ids."""
    ids = []
    for n in range(count):
        task = await node.engine.submit(f"gated {n}", steps=GATED, claim=True)
        task = await node.engine.advance(task)
        ids.append(task.approval.id)
    return ids


def posted(platform: Watched) -> list[str]:
    return [m.card.approval_id for m in platform.messages.values()]


async def test_posts_reach_the_platform_one_at_a_time_in_request_order(
        node_factory: NodeFactory) -> None:
    """Three windows' worth of posts: each once, in order, never two calls at once."""
    platform = Watched()
    node = await node_factory(SEPARATE, surfaces={"recording": platform})
    ids = await requests(node, 3 * WINDOW + 1)
    assert await node.flow.dispatcher.run_once() == len(ids)
    assert platform.started == ids
    assert posted(platform) == ids
    assert platform.most_inside == 1


async def test_a_failed_post_leaves_the_later_ones_untried_and_queued(
        node_factory: NodeFactory) -> None:
    """The second post of a window answers 503: the first is out, the rest of the window
    was never sent and counts no attempt; the next round posts them all, in order."""
    platform = Watched(fail={2: PlatformUnavailable("recording: 503")})
    node = await node_factory(SEPARATE, surfaces={"recording": platform})
    ids = await requests(node, WINDOW + 2)
    assert await node.flow.dispatcher.run_once() == 1
    assert platform.started == ids[:2]
    assert posted(platform) == ids[:1]
    queued = {i.approval_id: i for i in await node.store.due_outbox(
        node.clock.now() + timedelta(hours=1))}
    assert queued[ids[1]].attempts == 1
    assert all(queued[a].attempts == 0 for a in ids[2:])
    await asyncio.sleep(0.25)  # the first retry waits 0.2 s
    await node.flow.dispatcher.run_once()
    assert posted(platform) == ids


async def test_a_rate_limited_post_holds_the_rest_for_its_retry_after(
        node_factory: NodeFactory) -> None:
    """A 429 on the first post: nothing else is sent before its retry_after has passed."""
    platform = Watched(fail={1: RateLimited("recording: slow down", retry_after=60)})
    node = await node_factory(SEPARATE, surfaces={"recording": platform})
    ids = await requests(node, WINDOW)
    assert await node.flow.dispatcher.run_once() == 0
    assert await node.flow.dispatcher.run_once() == 0
    assert platform.started == ids[:1]
    assert posted(platform) == []
