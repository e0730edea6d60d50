"""cron_mode deny / approve / ask end to end, and on-call escalation, on a real engine,
flow and SQLite store with a recording chat surface and a local webhook receiver.

The recorder is named "slack" so that config-valid actor keys (``slack:U1``) are what
its clicks produce, and ``[[notify]]`` may name a ``slack:`` channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from signoff.bot.ports import CardRef
from signoff.bot.routing.escalation import Escalator
from signoff.bot.routing.oncall import OnCallRouter
from signoff.runtime.clock import FakeClock
from signoff.runtime.engine import EngineConfig
from signoff.runtime.models import Action, AuditEvent, RunMode, Scope, Task, TaskState
from signoff.runtime.schedule.scheduler import Scheduler
from signoff.testing import RecordingSurface
from signoff.wiring import Node
from tests.fakes.http_echo import HttpEcho

PRIMARY, SECONDARY, STRANGER = "U1", "U2", "U7"


@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    """A local HTTP server that records webhook posts."""
    async with HttpEcho() as server:
        yield server


@dataclass
class Rig:
    """One node with its surface, scheduler, escalator and clock."""

    node: Node
    slack: RecordingSurface
    scheduler: Scheduler
    escalator: Escalator
    clock: FakeClock
    echo: HttpEcho

    async def fire(self) -> Task:
        """Fire the schedule now and run the task as far as it goes."""
        task = await self.scheduler.fire("nightly", self.clock.now())
        assert task is not None
        cfg = self.node.engine.config
        claimed = await self.node.store.claim_next(cfg.node_id, self.clock.now() + cfg.lease)
        assert claimed is not None
        return await self.node.engine.advance(claimed)

    async def deliver(self) -> None:
        """Close notification windows and deliver every outbox job."""
        assert self.node.flow.notifier is not None
        await self.node.flow.notifier.flush(force=True)
        await self.node.flow.dispatcher.run_once()

    async def resume(self, task_id: str) -> Task:
        """Run an approved task (the worker's job) and return it."""
        task = await self.node.store.get_task(task_id)
        assert task is not None and task.state is TaskState.IN_PROGRESS
        return await self.node.engine.advance(task)

    async def ref(self, task: Task) -> CardRef:
        """Where the task's card was posted."""
        assert task.approval is not None
        [record] = await self.node.store.cards(task.approval.id)
        return CardRef(record.surface, record.channel, record.message_id)

    async def audit(self, task: Task) -> list[AuditEvent]:
        """The task's audit events."""
        page = await self.node.store.audit_events(task_id=task.id)
        return [e for e in page.items if isinstance(e, AuditEvent)]

    def notes(self) -> str:
        """Everything the team channel received."""
        return "\n".join(text for channel, text, _ in self.slack.notes if channel == "C-team")

    def webhooks(self) -> int:
        """How many webhook posts arrived."""
        return sum(1 for r in self.echo.requests if r.path == "/hook")


@pytest.fixture
def rig_factory(node_factory: Any, echo: HttpEcho) -> Any:
    """Build a rig for one cron_mode (and extra config)."""

    async def make(cron_mode: str, **extra: Any) -> Rig:
        # Ahead of real time: the outbox stamps new jobs with the wall clock.
        clock = FakeClock(datetime.now(UTC).replace(microsecond=0) + timedelta(days=1))
        slack = RecordingSurface(name="slack")
        config = {
            "slack": {"bot_token": "xoxb-test", "app_token": "xapp-test",
                      "channel": "C-approvals"},
            "schedules": [{"name": "nightly", "cron": "0 3 * * *", "cron_mode": cron_mode,
                           "timezone": "Europe/Berlin", "steps": [
                               {"tool": "write_file", "args": {"path": "report.txt",
                                                               "content": "all good"}},
                               {"tool": "send_webhook", "args": {
                                   "url": echo.url("/hook"), "payload": {"report": "ok"}}}]}],
            "oncall": {"rotations": [
                {"name": "primary", "members": [f"slack:{PRIMARY}"], "escalate_after": "10m",
                 "next": "secondary"},
                {"name": "secondary", "members": [f"slack:{SECONDARY}"]}]},
            "notify": [{"channel": "slack:C-team", "events": [
                "blocked", "failed", "completed", "waiting_approval", "escalated", "expired"]}],
            **extra,
        }
        node = await node_factory(config, clock=clock, surfaces={"slack": slack}, approvers=())
        rotations = [r.to_runtime() for r in node.settings.oncall.rotations]
        overrides = [o.to_runtime() for o in node.settings.oncall.overrides]
        router = OnCallRouter(rotations=rotations, overrides=overrides, clock=clock)
        node.authorizer.oncall = router.current
        escalator = Escalator(decider=node.decider, clock=clock, rotations=rotations,
                              overrides=overrides)
        scheduler = Scheduler(engine=node.engine,
                              schedules=[s.to_runtime() for s in node.settings.schedules])
        return Rig(node, slack, scheduler, escalator, clock, echo)

    return make


async def test_cron_mode_deny_blocks_sends_nothing_and_says_what_was_needed(rig_factory: Any
                                                                             ) -> None:
    """deny: the SEND step is blocked, nothing is posted, the team hears what it needed."""
    rig = await rig_factory("deny")
    task = await rig.fire()
    assert task.state is TaskState.FAILED
    assert task.result is not None
    assert task.result["reason"] == "blocked: needs approval but cron_mode is deny"
    assert (rig.node.work_dir / "report.txt").read_text() == "all good"  # DRAFT ran
    assert rig.webhooks() == 0
    await rig.deliver()
    assert rig.slack.messages == {}  # no card: nobody was asked
    assert (f"would have needed approval: send_webhook to {rig.echo.url('/hook')}; "
            "set cron_mode or add a grant") in rig.notes()
    [block] = [e for e in await rig.audit(task) if e.decision == "BLOCK"]
    assert (block.actor, block.tool) == ("auto:cron_mode", "send_webhook")


async def test_cron_mode_approve_runs_and_audits_the_automatic_approval(rig_factory: Any
                                                                        ) -> None:
    """approve: the run completes, the webhook is sent, the approval is audited."""
    rig = await rig_factory("approve")
    task = await rig.fire()
    assert task.state is TaskState.COMPLETED
    assert rig.webhooks() == 1
    assert rig.echo.requests[-1].json() == {"report": "ok"}
    [auto] = [e for e in await rig.audit(task) if e.actor == "auto:cron_mode"]
    assert (auto.decision, auto.tool, auto.kind) == ("approve", "send_webhook", "decision")
    await rig.deliver()
    assert rig.slack.messages == {}
    assert "✅ completed" in rig.notes()


async def test_cron_mode_ask_escalates_and_the_escalated_person_approves(rig_factory: Any
                                                                         ) -> None:
    """ask: card for on-call, strangers refused, escalation after 10m, secondary approves."""
    rig = await rig_factory("ask")
    task = await rig.fire()
    assert task.state is TaskState.WAITING_APPROVAL and rig.webhooks() == 0
    await rig.deliver()
    ref = await rig.ref(task)
    assert rig.slack.card(ref).tool == "send_webhook"
    assert "⏳ waiting approval" in rig.notes()

    stranger = await rig.slack.click(ref, Scope.ONCE, STRANGER)
    early = await rig.slack.click(ref, Scope.ONCE, SECONDARY)
    assert (stranger.code, early.code) == ("not_authorized", "not_authorized")

    rig.clock.advance(timedelta(minutes=9, seconds=59))
    assert await rig.escalator.tick() == []
    rig.clock.advance(timedelta(seconds=1))
    [escalated] = await rig.escalator.tick()
    assert escalated.id == task.id
    approval = await rig.node.store.get_approval(ref_approval(task))
    assert approval is not None
    assert approval.escalation_level == 1
    assert approval.approvers[-1] == f"slack:{SECONDARY}"  # appended to the on-call ones
    assert approval.escalated_at == rig.clock.now()
    stored = await rig.node.store.get_task(task.id)
    assert stored is not None and stored.approval == approval  # one atomic change
    await rig.deliver()
    card = rig.slack.card(ref)
    # Everyone asked now: the on-call asked first stays beside the escalation target.
    assert card.mentions == (f"slack:{PRIMARY}", f"slack:{SECONDARY}") and card.open
    assert len(rig.slack.messages) == 1  # the same card, edited
    assert "📣 escalated" in rig.notes() and f"slack:{SECONDARY}" in rig.notes()

    rig.clock.advance(timedelta(hours=1))
    assert await rig.escalator.tick() == []  # secondary is the end of the chain

    outcome = await rig.slack.click(ref, Scope.ONCE, SECONDARY)
    assert outcome.accepted, outcome.message
    done = await rig.resume(task.id)
    assert done.state is TaskState.COMPLETED and rig.webhooks() == 1
    events = await rig.audit(task)
    kinds = [(e.kind, e.actor) for e in events]
    assert ("refused", f"slack:{STRANGER}") in kinds
    assert ("escalated", None) in kinds
    assert ("decision", f"slack:{SECONDARY}") in kinds


async def test_escalation_is_a_new_message_under_the_card_naming_who_is_asked(
        rig_factory: Any) -> None:
    """Escalating edits the card and also replies under it, mentioning every approver now."""
    rig = await rig_factory("ask")
    task = await rig.fire()
    await rig.deliver()
    ref = await rig.ref(task)
    rig.clock.advance(timedelta(minutes=10))
    assert len(await rig.escalator.tick()) == 1
    await rig.deliver()
    # the edit names everyone asked now
    assert rig.slack.card(ref).mentions == (f"slack:{PRIMARY}", f"slack:{SECONDARY}")
    [(index, (channel, text, thread))] = [(i, n) for i, n in enumerate(rig.slack.notes)
                                          if n[2] is not None]
    assert thread == ref and channel == ref.channel
    assert text.startswith("No answer after 10m: escalated (level 1).")
    assert rig.slack.note_mentions[index] == (f"slack:{PRIMARY}", f"slack:{SECONDARY}")
    rig.clock.advance(timedelta(hours=1))
    await rig.escalator.tick()
    await rig.deliver()
    assert sum(1 for n in rig.slack.notes if n[2] is not None) == 1  # one reply per level


def ref_approval(task: Task) -> str:
    """The id of a task's approval request."""
    assert task.approval is not None
    return task.approval.id


async def test_original_approver_can_still_answer_after_escalation(rig_factory: Any) -> None:
    """Escalation extends the approvers; the on-call person keeps the right to answer."""
    rig = await rig_factory("ask")
    task = await rig.fire()
    await rig.deliver()
    rig.clock.advance(timedelta(minutes=10))
    assert len(await rig.escalator.tick()) == 1
    outcome = await rig.slack.click(await rig.ref(task), Scope.ONCE, PRIMARY)
    assert outcome.accepted
    assert (await rig.resume(task.id)).state is TaskState.COMPLETED


async def test_expiry_denies_and_is_not_escalated(rig_factory: Any) -> None:
    """A request past its timeout is denied by the sweeper and never escalated."""
    rig = await rig_factory("ask", approvals={"timeout": "5m"})
    task = await rig.fire()
    await rig.deliver()
    rig.clock.advance(timedelta(minutes=10))
    assert await rig.escalator.tick() == []
    [expired] = await rig.node.decider.expire_due()
    assert expired.result is not None and expired.result["reason"] == "approval timed out"
    await rig.deliver()
    card = rig.slack.card(await rig.ref(task))
    assert card.outcome is not None and card.outcome.startswith("Expired")
    assert rig.webhooks() == 0


async def test_two_escalators_escalate_once(rig_factory: Any) -> None:
    """Two nodes' escalators racing on one request: one escalation, one card update."""
    rig = await rig_factory("ask")
    task = await rig.fire()
    other = Escalator(decider=rig.node.decider, clock=rig.clock,
                      rotations=rig.escalator.rotations, overrides=rig.escalator.overrides)
    rig.clock.advance(timedelta(minutes=10))
    results = await asyncio.gather(rig.escalator.tick(), other.tick())
    assert sorted(len(r) for r in results) == [0, 1]
    escalations = [e for e in await rig.audit(task) if e.kind == "escalated"]
    assert len(escalations) == 1


async def test_engine_hook_routes_scheduled_requests_to_on_call(rig_factory: Any) -> None:
    """With the engine's approvers_for/timeout_for hooks, the request names the on-call
    approver, mentions them on the card, and uses the schedule's own timeout."""
    if not {"approvers_for", "timeout_for"} <= {f.name for f in fields(EngineConfig)}:
        pytest.skip("EngineConfig.approvers_for/timeout_for are not wired yet (issue 8)")
    rig = await rig_factory("ask")
    settings = rig.node.settings
    router = OnCallRouter(rotations=[r.to_runtime() for r in settings.oncall.rotations],
                          clock=rig.clock)
    rig.node.engine.config = replace(  # type: ignore[call-arg]
        rig.node.engine.config, approvers_for=router.approvers_for,
        timeout_for=lambda task: timedelta(hours=2))
    task = await rig.fire()
    assert task.approval is not None
    assert task.approval.approvers == [f"slack:{PRIMARY}"]
    assert task.approval.expires_at - task.approval.requested_at == timedelta(hours=2)
    await rig.deliver()
    assert rig.slack.card(await rig.ref(task)).mentions == (f"slack:{PRIMARY}",)


async def test_interactive_requests_are_not_escalated(rig_factory: Any) -> None:
    """Only scheduled runs go up the on-call chain."""
    rig = await rig_factory("ask")
    engine = rig.node.engine
    task = await engine.submit("ping the hook", steps=[Action(
        tool="send_webhook", args={"url": rig.echo.url("/hook"), "payload": {}})],
        mode=RunMode.INTERACTIVE, claim=True)
    assert task is not None
    assert (await engine.advance(task)).state is TaskState.WAITING_APPROVAL
    rig.clock.advance(timedelta(hours=1))
    assert await rig.escalator.tick() == []
