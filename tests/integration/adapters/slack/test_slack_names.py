"""People by name on Slack: a click on the real SlackSurface (fake Slack, real bolt) is
shown by the person's Slack name on the card and the team line; the audit log keeps the
id; `[[people]]` names win."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from signoff.bot.ports import CardRef
from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, Scope, Task, TaskState
from signoff.wiring import Node, build_node
from tests.fakes.slack_api import (
    APPROVALS,
    BOT_TOKEN,
    SECRET,
    FakeSlack,
    SlackHarness,
    message_text,
)

TEAM = "C0TEAM"


@dataclass
class Rig:
    """A node whose chat surface is an http-mode SlackSurface on the fake, running."""

    node: Node
    fake: FakeSlack
    harness: SlackHarness
    clock: FakeClock

    async def waiting(self) -> Task:
        """A task parked on a SEND action, its card posted."""
        task = await self.node.engine.submit("ping the hook", claim=True, steps=[
            Action(tool="send_webhook", args={"url": "http://127.0.0.1:9/hook",
                                              "payload": {}})])
        assert task is not None
        task = await self.node.engine.advance(task)
        assert task.state is TaskState.WAITING_APPROVAL
        await self.deliver()
        return task

    async def deliver(self) -> None:
        """Write the team lines and deliver every outbox job."""
        assert self.node.flow.notifier is not None
        await self.node.flow.notifier.flush(force=True)
        for _ in range(3):
            await self.node.flow.dispatcher.run_once()

    def card_ref(self, task: Task) -> CardRef:
        """Where the task's card is in the fake."""
        [(channel, ts)] = [k for k, m in self.fake.messages.items()
                           if k[0] != TEAM and not m.get("thread_ts")
                           and task.approval is not None
                           and task.approval.id in str(m.get("metadata"))]
        return CardRef("slack", channel, ts)

    async def click(self, task: Task, user: str, scope: Scope = Scope.DENY) -> None:
        """``user`` presses a button of the task's card on Slack."""
        ref = self.card_ref(task)
        await self.harness.send(self.harness.payload(ref, scope, user))
        await self.harness.outcomes.get()
        await self.deliver()

    def team_lines(self) -> list[str]:
        """What the team channel got."""
        return [html.unescape(t) for t in self.fake.posted_texts(TEAM)]


@pytest.fixture
def make_rig(tmp_path: Path) -> Callable[..., Any]:
    """Build a rig with extra config (e.g. `[[people]]`)."""
    async def make(**extra: Any) -> AsyncIterator[Rig]:
        async with FakeSlack() as fake:
            fake.people["U0ALICE"] = ("Alice Liddell", "alice.l")
            work = tmp_path / "work"
            work.mkdir(exist_ok=True)
            settings = Settings.model_validate({
                "daemon": {"work_dir": str(work)},
                "approvals": {"approvers": ["slack:U0ALICE"]},
                "slack": {"bot_token": BOT_TOKEN, "channel": APPROVALS, "mode": "http",
                          "signing_secret": SECRET, "api_url": fake.api_url},
                "notify": [{"channel": f"slack:{TEAM}", "events": ["approved", "denied"]}],
                **extra})
            clock = FakeClock()
            harness = SlackHarness.http_mode(fake, clock=clock)
            node = build_node(settings, surfaces={"slack": harness.surface}, clock=clock,
                              database=f"sqlite:///{tmp_path / 'signoff.db'}")
            await node.store.open()
            await harness.start(node.flow.on_decision)
            try:
                yield Rig(node, fake, harness, clock)
            finally:
                await harness.stop()
                await node.store.close()
    return make


@pytest.fixture
async def rig(make_rig: Callable[..., Any]) -> AsyncIterator[Rig]:
    async for made in make_rig():
        yield made


async def test_a_slack_decision_shows_the_slack_name_and_audits_the_id(rig: Rig) -> None:
    """Alice's deny reads "by alice.l" (her Slack display name) on the card and the team
    line; the audit log keeps slack:U0ALICE."""
    task = await rig.waiting()
    await rig.click(task, "U0ALICE")
    card = message_text(rig.fake.message(*_key(rig.card_ref(task))))
    assert "Denied by alice.l" in card, card
    [line] = [t for t in rig.team_lines() if "denied" in t]
    assert "by alice.l" in line and "U0ALICE" not in line, line
    events = await rig.node.store.audit_events(task_id=task.id)
    assert [e.actor for e in events.items if e.kind == "decision"] == ["slack:U0ALICE"]


async def test_the_slack_name_is_asked_once_and_cached(rig: Rig) -> None:
    """Two decisions by one person cost one users.info call."""
    for _ in range(2):
        await rig.click(await rig.waiting(), "U0ALICE")
    assert len(rig.fake.calls_to("users.info")) == 1


async def test_the_cached_name_lapses_after_a_day(rig: Rig) -> None:
    """A day later (the Clock) the name is asked again: a renamed person reads right."""
    await rig.click(await rig.waiting(), "U0ALICE")
    rig.clock.advance(86_401)
    await rig.click(await rig.waiting(), "U0ALICE")
    assert len(rig.fake.calls_to("users.info")) == 2


async def test_people_names_win_over_the_slack_name(make_rig: Callable[..., Any]) -> None:
    """With `[[people]]` listing slack:U0ALICE as "Alice", lines say "by Alice"."""
    async for rig in make_rig(people=[{"name": "Alice", "accounts": ["slack:U0ALICE"]}]):
        await rig.click(await rig.waiting(), "U0ALICE")
        [line] = [t for t in rig.team_lines() if "denied" in t]
        assert "by Alice " in line or line.endswith("by Alice"), line
        assert "alice.l" not in line


async def test_an_unknown_user_is_shown_by_the_click_s_username(rig: Rig) -> None:
    """users.info answering user_not_found neither fails nor delays the decision: the card
    shows the username the click carried."""
    task = await rig.waiting()
    rig.fake.people.clear()
    await rig.click(task, "U0ALICE")
    current = await rig.node.store.get_task(task.id)
    assert current is not None and current.state is TaskState.FAILED
    card = message_text(rig.fake.message(*_key(rig.card_ref(task))))
    assert "Denied by u0alice" in card, card


def _key(ref: CardRef) -> tuple[str, str]:
    return ref.channel, ref.message_id
