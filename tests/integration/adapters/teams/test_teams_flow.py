"""Teams clicks decided by the real flow on a real node (SQLite): who may decide, what the
clicker is shown, the audit trail, and delivery through the outbox while the connector
fails 30 % of its calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from signoff.adapters.teams import TeamsSurface
from signoff.adapters.teams.cards import rendered_text
from signoff.bot.outbox import FOREVER
from signoff.bot.ports import Actor, DecisionEvent
from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, ApprovalStatus, Scope, TaskState
from signoff.testing import route_client
from signoff.wiring import Node, PendingCards, build_node
from tests.contract.test_teams_contract import ALICE, NOW, TeamsHarness, teams_platform
from tests.fakes.teams_api import FakeTeams

MALLORY = "00000000-0000-0000-0000-0000000000e1"


@dataclass
class Rig:
    """A node whose only chat surface is Teams, and a harness to click on it."""

    node: Node
    teams: TeamsHarness

    async def until(self, check: Callable[[], bool], timeout: float = 20.0) -> None:
        """Deliver the outbox until ``check()`` holds."""
        async with asyncio.timeout(timeout):
            while not check():
                await self.node.flow.dispatcher.run_once()
                await asyncio.sleep(0.01)

    async def drain(self, timeout: float = 60.0) -> None:
        """Deliver the outbox until it is empty, moving the clock past each retry's wait."""
        async with asyncio.timeout(timeout):
            while await self.node.store.due_outbox(FOREVER):
                await self.node.flow.dispatcher.run_once()
                self.teams.clock.advance(1.0)  # the outbox's backoff runs on this clock
                await asyncio.sleep(0)

    async def gated(self, n: int = 0) -> str:
        """A task waiting for approval; its approval id."""
        task = await self.node.engine.submit(f"call {n}", claim=True, steps=[
            Action(tool="send_webhook", args={"url": f"http://127.0.0.1:9/{n}",
                                              "payload": {}})])
        assert task is not None
        task = await self.node.engine.advance(task)
        assert task.state is TaskState.WAITING_APPROVAL and task.approval is not None
        return task.approval.id


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """Alice (by AAD object id) is the one approver; the surface runs on the flow."""
    clock = FakeClock(NOW)
    async with FakeTeams() as fake:
        pending = PendingCards()
        surface: TeamsSurface = teams_platform(fake, clock, lookup=pending.lookup)
        settings = Settings.model_validate({
            "daemon": {"work_dir": str(tmp_path / "work")},
            "approvals": {"approvers": [f"teams:{ALICE}"]}})
        node = build_node(settings, surfaces={"teams": surface}, clock=clock,
                          database=f"sqlite:///{tmp_path / 'teams.db'}")
        pending.node = node
        await node.store.open()
        async with route_client(surface) as client:
            harness = TeamsHarness(fake=fake, surface=surface, clock=clock, client=client)
            await harness.start(node.flow.on_decision)
            yield Rig(node, harness)
            await harness.stop()
        await surface.aclose()
        await node.store.close()
        assert fake.violations == []


async def test_an_unauthorized_click_is_refused_audited_and_the_card_stays(rig: Rig) -> None:
    """Mallory (not an approver) clicks Once: the request stays pending, the card keeps
    its buttons, Mallory is shown the card unchanged with why, and the audit says so."""
    approval_id = await rig.gated()
    await rig.until(lambda: bool(rig.teams.fake.posted))
    activity_id = rig.teams.fake.posted[0]
    before = rig.teams.fake.activity(activity_id).card
    response = await rig.teams.post(rig.teams.fake.click(activity_id, "Once", aad=MALLORY))
    answer = response.json()
    assert response.status_code == 200 and answer["type"].endswith("card.adaptive")
    assert "Not authorized" in rendered_text(answer["value"])
    assert [a["title"] for a in answer["value"]["actions"]] == \
        [a["title"] for a in before["actions"]]
    approval = await rig.node.store.get_approval(approval_id)
    assert approval is not None and approval.status is ApprovalStatus.PENDING
    events = (await rig.node.store.audit_events(limit=100)).items
    assert any(e.kind == "refused" and e.actor == f"teams:{MALLORY}" for e in events)
    await rig.drain()
    assert rig.teams.fake.activity(activity_id).edits == 0, "a refusal edits nothing"


async def test_an_approvers_click_decides_and_the_card_is_edited_in_place(rig: Rig) -> None:
    """Alice clicks Once: the invoke answer is the decided card, and the posted card is
    updated (PUT) to show the outcome without buttons; a later click changes nothing."""
    approval_id = await rig.gated()
    await rig.until(lambda: bool(rig.teams.fake.posted))
    activity_id = rig.teams.fake.posted[0]
    answer = (await rig.teams.post(rig.teams.fake.click(activity_id, "Once", aad=ALICE))).json()
    assert answer["value"]["actions"] == [] or all(
        a["type"] != "Action.Execute" for a in answer["value"]["actions"])
    approval = await rig.node.store.get_approval(approval_id)
    assert approval is not None and approval.status is not ApprovalStatus.PENDING
    await rig.until(lambda: rig.teams.fake.activity(activity_id).edits == 1)
    edited = rig.teams.fake.activity(activity_id)
    assert edited.labels == () and "Approved" in edited.text
    assert ("PUT", f"/teams/v3/conversations/{rig.teams.fake.conversation_id}"
            f"/activities/{activity_id}") in [(m, p.replace("%3A", ":").replace("%40", "@"))
                                               for m, p in rig.teams.fake.calls]


async def test_a_late_click_shows_the_decided_card_and_decides_nothing(rig: Rig) -> None:
    """A click that arrives after the request was decided (an old copy of the card) is
    answered with the card as it is now and a line saying so; the decision stands."""
    approval_id = await rig.gated()
    await rig.until(lambda: bool(rig.teams.fake.posted))
    activity_id = rig.teams.fake.posted[0]
    late = rig.teams.fake.click(activity_id, "Deny", aad=ALICE)  # built while it was open
    await rig.teams.post(rig.teams.fake.click(activity_id, "Once", aad=ALICE))
    answer = (await rig.teams.post(late)).json()
    text = rendered_text(answer["value"])
    assert "Approved" in text and "Deny" not in [a.get("title") for a in
                                                 answer["value"]["actions"]]
    approval = await rig.node.store.get_approval(approval_id)
    assert approval is not None and approval.decided_by == f"teams:{ALICE}"
    assert approval.status is not ApprovalStatus.DENIED


@pytest.mark.slow
async def test_with_30_percent_of_calls_failing_every_card_arrives_once_and_is_edited_once(
        rig: Rig) -> None:
    """The connector answers 500 or 429 to about 30 % of calls: the outbox retries until
    each of 20 cards is posted exactly once and, after its decision, edited exactly once."""
    fake = rig.teams.fake
    fake.fail_ratio(0.3)
    requested = [await rig.gated(n) for n in range(20)]
    await rig.drain()
    assert len(fake.posted) == 20, "every card once"
    by_approval = {fake.activity(a).card["actions"][0]["data"]["approval_id"]: a
                   for a in fake.posted}
    assert sorted(by_approval) == sorted(requested)
    for approval_id in requested:
        outcome = await rig.node.flow.on_decision(DecisionEvent(
            approval_id=approval_id, scope=Scope.ONCE, actor=Actor("teams", ALICE),
            surface="teams"))
        assert outcome.accepted, outcome.message
    await rig.drain()
    assert [fake.activity(a).edits for a in fake.posted] == [1] * 20, "every card edited once"
    assert all(fake.activity(a).labels == () for a in fake.posted)
    assert fake.failures_served > 0, "the connector really failed"
