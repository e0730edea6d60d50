"""Discord through the whole approval flow (a node on SQLite, the real DiscordSurface on
the fake Discord, a second surface beside it): decisions edit every copy, refusals are
answered to the clicker alone and audited, a quorum spans surfaces, and a flaky Discord
still gets every card once and every edit once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from signoff.bot.outbox import FOREVER
from signoff.bot.ports import CardRef
from signoff.config.settings import Settings
from signoff.runtime.models import Action, Scope, Task, TaskState
from signoff.testing import RecordingSurface
from signoff.wiring import Node, build_node
from tests.fakes.discord_api import APPROVALS, DiscordHarness, FakeDiscord

DELETE = [Action(tool="delete_file", args={"path": "old.txt"})]
ALICE = "4242"  # a Discord approver


@dataclass
class Rig:
    """A node with Discord (on the fake) and a recording surface named slack."""

    node: Node
    discord: DiscordHarness
    other: RecordingSurface

    async def waiting(self) -> Task:
        """A task parked on a DESTRUCTIVE action, its cards delivered."""
        task = await self.node.engine.submit("clean up", steps=DELETE, claim=True)
        assert task is not None
        task = await self.node.engine.advance(task)
        assert task.state is TaskState.WAITING_APPROVAL and task.approval is not None
        await self.deliver()
        return task

    async def deliver(self) -> None:
        """Run outbox rounds until nothing is due, moving the clock past each backoff."""
        for _ in range(400):
            await self.node.flow.dispatcher.run_once()
            if not await self.node.store.due_outbox(FOREVER):
                return
            self.discord.clock.advance(5)
        raise AssertionError("the outbox never emptied")

    def card(self) -> CardRef:
        [message] = [m for m in self.discord.fake.channel_messages(APPROVALS)
                     if not m.message_reference]
        return CardRef("discord", APPROVALS, message.id)

    async def click(self, label: str, user_id: str = ALICE) -> dict[str, Any]:
        """Click a button of the Discord card; Discord's answer to the interaction."""
        ref = self.card()
        response = await self.discord.post(
            self.discord.fake.click(ref.channel, ref.message_id, label, user_id=user_id))
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def finish(self, task: Task) -> Task:
        """Run the task past its decision and deliver the card edits."""
        ready = await self.node.worker._ready.get()
        assert ready.id == task.id
        done = await self.node.engine.advance(ready)
        await self.deliver()
        return done


def settings(tmp_path: Path, **extra: Any) -> Settings:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "old.txt").write_text("old")
    approvals = {"approvers": [f"discord:{ALICE}", "slack:U1"], "hold": {"DESTRUCTIVE": "0s"},
                 **extra.pop("approvals", {})}
    return Settings.model_validate({"daemon": {"work_dir": str(work)},
                                    "approvals": approvals, **extra})


@pytest.fixture
async def rig(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    """The node, its Discord surface running, and the other surface attached."""
    extra = getattr(request, "param", {})
    async with FakeDiscord() as fake, DiscordHarness.on(fake) as discord:
        other = RecordingSurface(name="slack")
        node = build_node(settings(tmp_path, **extra), clock=discord.clock,
                          surfaces={"discord": discord.surface, "slack": other},
                          database=f"sqlite:///{tmp_path / 'signoff.db'}")
        await node.store.open()
        other.attach(node.flow.on_decision)
        await discord.start(node.flow.on_decision)
        yield Rig(node, discord, other)
        await discord.stop()
        await node.store.close()


async def test_a_click_decides_and_every_copy_shows_the_outcome(rig: Rig) -> None:
    """Alice clicks Once on Discord: the task runs, the Discord card and the other
    surface's copy show the outcome by her Discord name, and no buttons are left."""
    task = await rig.waiting()
    assert await rig.click("Once") == {"type": 6}
    done = await rig.finish(task)
    assert done.state is TaskState.COMPLETED
    message = rig.discord.fake.message(APPROVALS, rig.card().message_id)
    assert message.labels == () and message.edits == 1
    # By the name Discord gave for her (names learned from the click), on every copy.
    assert "Approved once by Alice" in message.text
    [copy] = rig.other.messages.values()
    assert copy.card.status == "approved" and (copy.card.outcome or "").startswith(
        "Approved once by Alice")


async def test_an_unauthorized_click_is_answered_privately_and_audited(rig: Rig) -> None:
    """A member who is no approver is told so ephemerally; the refusal is audited under
    their Discord id, and the card stays open."""
    task = await rig.waiting()
    answer = await rig.click("Once", user_id="999")
    assert answer["type"] == 4 and answer["data"]["flags"] == 64
    assert "Not authorized" in answer["data"]["content"]
    events = (await rig.node.store.audit_events(task_id=task.id)).items
    assert ("refused", "discord:999") in [(e.kind, e.actor) for e in events]
    assert rig.discord.fake.message(APPROVALS, rig.card().message_id).labels


async def test_a_late_click_is_answered_privately_and_audited(rig: Rig) -> None:
    """A click on a card already decided elsewhere is told "already" and audited."""
    task = await rig.waiting()
    assert task.approval is not None
    await rig.node.decider.decide(task.approval.id, Scope.DENY, "slack:U1")
    answer = await rig.click("Once")
    assert answer["type"] == 4 and answer["data"]["flags"] == 64
    assert "already" in answer["data"]["content"].lower()
    events = (await rig.node.store.audit_events(task_id=task.id)).items
    assert [e for e in events if e.kind == "refused" and e.actor == f"discord:{ALICE}"]


async def test_a_post_stored_before_a_500_is_not_posted_again(rig: Rig) -> None:
    """Discord keeps the card and answers 500: the retry ends with one card (the enforced
    nonce, and the lookup of the channel), which the decision then edits."""
    rig.discord.fake.fail_after_store_next("messages.create")
    task = await rig.waiting()
    assert len([m for m in rig.discord.fake.channel_messages(APPROVALS)
                if not m.message_reference]) == 1
    assert task.approval is not None
    [record] = [r for r in await rig.node.store.cards(task.approval.id)
                if r.surface == "discord"]
    assert record.message_id == rig.card().message_id
    await rig.click("Once")
    await rig.finish(task)
    assert rig.discord.fake.message(APPROVALS, rig.card().message_id).labels == ()


async def test_every_copy_is_edited_after_the_decision(rig: Rig) -> None:
    """A copy the store never heard of (posted by a process that died before recording
    it, minutes ago) is found after the decision and edited too: no live buttons remain."""
    from signoff.bot.cards import build_card

    task = await rig.node.engine.submit("clean up", steps=DELETE, claim=True)
    assert task is not None
    task = await rig.node.engine.advance(task)
    assert task.approval is not None
    await rig.discord.surface.post_card(build_card(task, task.approval))
    rig.discord.fake.forget_nonces()
    await rig.deliver()
    cards = [m for m in rig.discord.fake.channel_messages(APPROVALS) if not m.message_reference]
    assert len(cards) == 2
    await rig.node.decider.decide(task.approval.id, Scope.DENY, "slack:U1")
    await rig.deliver()
    for message in cards:
        assert message.labels == () and "⛔" in message.text, message.id


@pytest.mark.parametrize("rig", [{"policy": {"quorum": {"fs.delete": 2}}}], indirect=True)
async def test_one_approval_on_discord_and_one_elsewhere_make_the_quorum(rig: Rig) -> None:
    """Alice's Discord click counts 1 of 2 (told to her alone, shown on the card); a
    second approver on the other surface completes it and both copies say so."""
    task = await rig.waiting()
    partial = await rig.click("Once")
    assert partial["type"] == 4 and "1 of 2" in partial["data"]["content"]
    await rig.deliver()
    assert "1 of 2 approvals" in rig.discord.fake.message(APPROVALS, rig.card().message_id).text
    [ref] = [CardRef("slack", "recording", key) for key in rig.other.messages]
    assert (await rig.other.click(ref, Scope.ONCE, "U1")).accepted
    done = await rig.finish(task)
    assert done.state is TaskState.COMPLETED
    message = rig.discord.fake.message(APPROVALS, rig.card().message_id)
    assert message.labels == () and "Approved once" in message.text


@pytest.mark.parametrize("rig", [{"approvals": {"coalesce": False}}], indirect=True)
async def test_a_flaky_discord_gets_every_card_once_and_every_edit_once(rig: Rig) -> None:
    """With 30% of Discord's answers 500 or 429, twenty cards are each posted once and,
    after the decisions, each edited once."""
    rig.discord.fake.fail_ratio(0.3, retry_after=2.0)
    ids = []
    for n in range(20):
        task = await rig.node.engine.submit(f"t{n}", steps=DELETE, claim=True)
        assert task is not None
        task = await rig.node.engine.advance(task)
        assert task.approval is not None
        ids.append(task.approval.id)
    await rig.deliver()
    for approval_id in ids:
        await rig.node.decider.decide(approval_id, Scope.DENY, "web:admin")
    await rig.deliver()
    cards = [m for m in rig.discord.fake.channel_messages(APPROVALS)
             if not m.message_reference]
    posted = [c.body["embeds"][0]["description"] for c in rig.discord.fake.calls_to(
        "messages.create") if c.status == 200 and "message_reference" not in c.body]
    assert sorted(i for i in ids if any(i in text for text in posted)) == sorted(ids)
    assert len(cards) == 20, "each card exactly once"
    assert all(m.edits == 1 and m.labels == () and "⛔" in m.text for m in cards)
    assert rig.discord.fake.rate_limited > 0, "failures really happened"
