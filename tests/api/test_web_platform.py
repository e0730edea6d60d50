"""WebSurface on its own: bounded live-update queues, card memory, the decision handler."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from signoff.adapters.web import WebSurface
from signoff.adapters.web.surface import Broadcaster
from signoff.bot.ports import Actor, DecisionEvent, DecisionOutcome
from signoff.runtime.models import Scope
from signoff.testing import sample_card


async def test_a_slow_subscriber_keeps_only_the_newest_events() -> None:
    """A full queue drops its oldest events instead of blocking the publisher."""
    hub = Broadcaster(queue_size=3)
    with hub.subscribe() as queue:
        for n in range(10):
            hub.publish(f"e{n}")
        assert [queue.get_nowait() for _ in range(queue.qsize())] == ["e7", "e8", "e9"]
    assert hub.count == 0


async def test_close_ends_every_subscriber() -> None:
    """close() delivers the end marker even to a full queue."""
    hub = Broadcaster(queue_size=2)
    with hub.subscribe() as first, hub.subscribe() as second:
        hub.publish("a")
        hub.publish("b")
        hub.close()
        for queue in (first, second):
            items = [queue.get_nowait() for _ in range(queue.qsize())]
            assert items[-1] is None


async def test_cards_are_kept_and_announced() -> None:
    """post_card and update_card keep the latest card per approval and publish a change."""
    web = WebSurface(max_cards=2)
    with web.broadcaster.subscribe() as queue:
        card = sample_card()
        ref = await web.post_card(card)
        assert (ref.surface, ref.message_id) == ("web", card.approval_id)
        await web.update_card(ref, replace(card, status="approved", outcome="Approved once"))
        assert web.card(card.approval_id).status == "approved"  # type: ignore[union-attr]
        assert queue.qsize() == 2
        await web.post_card(sample_card(approval_id="a2"))
        await web.post_card(sample_card(approval_id="a3"))
        assert web.card(card.approval_id) is None, "the oldest card is forgotten past max_cards"


async def test_run_keeps_the_handler_until_cancelled() -> None:
    """Console clicks reach run()'s handler; without run() they use the fallback."""
    web = WebSurface()
    seen: list[str] = []

    async def running(event: DecisionEvent) -> DecisionOutcome:
        seen.append("running")
        return DecisionOutcome(True, "ok from run")

    async def fallback(event: DecisionEvent) -> DecisionOutcome:
        seen.append("fallback")
        return DecisionOutcome(False, "ok from fallback")

    event = DecisionEvent("a1", Scope.ONCE, Actor("web", "admin"), "web")
    task = asyncio.create_task(web.run(running))
    await asyncio.sleep(0)
    assert (await web.decide(event, fallback)).message == "ok from run"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert (await web.decide(event, fallback)).message == "ok from fallback"
    assert seen == ["running", "fallback"]
    assert list(web.feedback) == ["ok from run", "ok from fallback"]
