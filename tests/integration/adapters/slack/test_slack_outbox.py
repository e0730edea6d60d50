"""Cards through the outbox onto the real SlackSurface (fake Slack): a post that failed
ambiguously — Slack stored the message, then answered 500 — never leaves a second card
whose buttons stay live."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from signoff.adapters.slack import SlackSurface
from signoff.bot.cards import build_card
from signoff.bot.ports import Actor, DecisionEvent
from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, Scope, Task, TaskState
from signoff.wiring import Node, build_node
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack, message_buttons


@dataclass
class Rig:
    """A node whose only chat surface is Slack on the fake."""

    node: Node
    fake: FakeSlack
    surface: SlackSurface
    clock: FakeClock

    async def waiting(self) -> Task:
        """A task parked on a DESTRUCTIVE action; its card jobs are queued, not delivered."""
        task = await self.node.engine.submit("clean up", claim=True, steps=[
            Action(tool="delete_file", args={"path": "old.txt"})])
        assert task is not None
        task = await self.node.engine.advance(task)
        assert task.state is TaskState.WAITING_APPROVAL and task.approval is not None
        return task

    async def deliver(self) -> None:
        """Run outbox rounds until nothing is left, moving the clock past each backoff."""
        for _ in range(10):
            await self.node.flow.dispatcher.run_once()
            self.clock.advance(61)

    def cards(self) -> list[tuple[str, str]]:
        """(channel, ts) of every card message (not thread replies) in the fake."""
        return [key for key, m in self.fake.messages.items() if not m.get("thread_ts")]

    async def approve(self, task: Task) -> None:
        """Alice approves once; the task runs and the card edits are delivered."""
        assert task.approval is not None
        outcome = await self.node.flow.on_decision(DecisionEvent(
            approval_id=task.approval.id, scope=Scope.ONCE, surface="slack",
            actor=Actor("slack", "U0ALICE")))
        assert outcome.accepted, outcome.message
        current = await self.node.store.get_task(task.id)
        assert current is not None
        await self.node.engine.advance(current)
        await self.deliver()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """Fake Slack, an http-mode SlackSurface and a node on SQLite with a fake clock."""
    async with FakeSlack() as fake:
        work = tmp_path / "work"
        work.mkdir()
        (work / "old.txt").write_text("old")
        surface = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                               signing_secret=SECRET, api_url=fake.api_url)
        await surface.check()  # learns the bot's id, as the daemon does at start
        settings = Settings.model_validate({"daemon": {"work_dir": str(work)},
                                            "approvals": {"approvers": ["slack:U0ALICE"]}})
        clock = FakeClock()
        node = build_node(settings, surfaces={"slack": surface}, clock=clock,
                          database=f"sqlite:///{tmp_path / 'signoff.db'}")
        await node.store.open()
        yield Rig(node, fake, surface, clock)
        await node.store.close()


async def test_cards_carry_the_approval_id_as_message_metadata(rig: Rig) -> None:
    """Every card is posted with metadata event_type signoff_approval and its approval id."""
    task = await rig.waiting()
    await rig.deliver()
    [key] = rig.cards()
    assert task.approval is not None
    assert rig.fake.message(*key)["metadata"] == {
        "event_type": "signoff_approval", "event_payload": {"approval_id": task.approval.id}}


async def test_a_post_stored_before_a_500_is_adopted_not_posted_again(rig: Rig) -> None:
    """Slack keeps the message and answers 500: the retry finds it in conversations.history
    and adopts it; after the decision that one card shows the outcome, no buttons left."""
    rig.fake.fail_after_store_next("chat.postMessage", status=500)
    task = await rig.waiting()
    await rig.deliver()
    [key] = rig.cards()  # one card, not two
    [lookup] = rig.fake.calls_to("conversations.history")
    assert lookup.body["include_all_metadata"] in ("1", "true")
    assert task.approval is not None
    [record] = await rig.node.store.cards(task.approval.id)
    assert (record.channel, record.message_id) == key
    await rig.approve(task)
    assert message_buttons(rig.fake.message(*key)) == ()
    assert "Approved once by" in rig.fake.message(*key)["text"]


async def test_every_copy_is_edited_after_the_decision(rig: Rig) -> None:
    """A copy the store never heard of (posted, then the process died before recording
    it) is found after the decision and edited too: no card keeps live buttons."""
    task = await rig.waiting()
    assert task.approval is not None
    card = build_card(task, task.approval)
    await rig.surface.post_card(card)  # the earlier process's post, never recorded
    await rig.deliver()
    assert len(rig.cards()) == 2
    await rig.approve(task)
    for key in rig.cards():
        assert message_buttons(rig.fake.message(*key)) == (), key
        assert "Approved once by" in rig.fake.message(*key)["text"]


async def test_without_the_history_scope_a_failed_post_is_still_retried(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    """If Slack refuses the lookup (no channels:history), the card is posted again rather
    than never, and the log says which scope would prevent the duplicate."""
    caplog.set_level(logging.WARNING, logger="signoff.adapters.slack")
    rig.fake.scopes.discard("channels:history")
    rig.fake.fail_next("chat.postMessage", status=500)  # nothing stored this time
    task = await rig.waiting()
    await rig.deliver()
    assert len(rig.cards()) == 1
    assert rig.fake.calls_to("conversations.history")
    assert task.approval is not None and len(await rig.node.store.cards(task.approval.id)) == 1
    assert "slack_card_lookup_refused" in caplog.text and "channels:history" in caplog.text


async def test_find_cards_sees_only_our_top_level_cards_of_that_approval(rig: Rig) -> None:
    """The lookup ignores other approvals, thread replies and other apps' messages."""
    task = await rig.waiting()
    other = await rig.waiting()
    assert task.approval is not None and other.approval is not None
    card = build_card(task, task.approval)
    first = await rig.surface.post_card(card)
    second = await rig.surface.post_card(card)
    await rig.surface.post_card(build_card(other, other.approval))
    await rig.surface.notify("", "a reply", thread=first)
    foreign = dict(rig.fake.message(first.channel, first.message_id), ts="1.000001",
                   bot_id="B0SOMEONE")
    rig.fake.messages[(first.channel, "1.000001")] = foreign
    assert await rig.surface.find_cards(card) == [first, second]
