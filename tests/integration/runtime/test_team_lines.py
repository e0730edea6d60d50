"""The team channel's lines as a node writes them: a task says when it starts (once),
decisions name who decided, and every action approved without a person is announced."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from signoff.bot.notify import NotifyRule
from signoff.bot.ports import Actor, DecisionEvent
from signoff.runtime.events import TaskEvent
from signoff.runtime.models import Action, Approval, RiskClass, RunMode, Scope, Task, TaskState
from signoff.runtime.store.memory import MemTaskStore
from signoff.wiring import Node
from tests.agentkit import agent_node, decide, last_card_ref, recorder, start
from tests.conftest import NodeFactory
from tests.factories import FakeJudge, NoopTool, noop
from tests.factories import start as factory_start
from tests.fakes.http_echo import HttpEcho
from tests.fakes.openai import Answer, FakeOpenAI, steps

ALL = frozenset(e.value for e in TaskEvent)


@pytest.fixture
async def echo() -> AsyncIterator[HttpEcho]:
    """A local webhook target."""
    async with HttpEcho() as server:
        yield server


class Heard:
    """An engine listener that keeps every task event (kind, detail)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None]] = []

    async def approval_requested(self, task: Task | None, approval: Approval) -> None:
        """Not needed here."""

    async def approval_decided(self, task: Task | None, approval: Approval) -> None:
        """Not needed here."""

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """Keep it."""
        self.events.append((str(kind), detail))

    def kinds(self) -> list[str]:
        """The kinds heard, in order."""
        return [k for k, _ in self.events]


async def team_node(node_factory: NodeFactory, tmp_path: Path,
                    extra: dict[str, Any] | None = None) -> tuple[Node, Heard]:
    """A node whose team channel (on the recording surface) hears every event, unfolded."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    node = await node_factory({"daemon": {"work_dir": str(work)}, **(extra or {})})
    notifier = node.flow.notifier
    assert notifier is not None
    notifier.rules = [NotifyRule(platform="recording", channel="team", events=ALL)]
    notifier.window = notifier.window * 0  # every line at once
    heard = Heard()
    node.listener.add(heard)
    return node, heard


async def team_lines(node: Node) -> list[str]:
    """The lines the team channel got."""
    await node.flow.dispatcher.run_once()
    return [text for channel, text, _ in recorder(node).notes if channel == "team"]


def hook(echo: HttpEcho) -> list[Action]:
    """One SEND step: a webhook to the echo server."""
    return [Action(tool="send_webhook", args={"url": echo.url("/hook"), "payload": {"a": 1}})]


async def test_started_is_said_once_not_again_after_the_decision(
        node_factory: NodeFactory, tmp_path: Path, echo: HttpEcho) -> None:
    """A task that waits for a person says `started` when it begins, and not again when
    it runs on after the approval."""
    node, heard = await team_node(node_factory, tmp_path)
    task = await start(node, "ping the hook", steps=hook(echo))
    assert task.state is TaskState.WAITING_APPROVAL
    done = await decide(node, Scope.ONCE)
    assert done.state is TaskState.COMPLETED
    assert heard.kinds().count("started") == 1
    assert heard.kinds()[:3] == ["queued", "started", "waiting_approval"]
    lines = await team_lines(node)
    assert any(line.startswith("▶️ started: ping the hook") for line in lines), lines


async def test_approved_line_names_the_decider(node_factory: NodeFactory, tmp_path: Path,
                                               echo: HttpEcho) -> None:
    """The `approved` line says who approved, by their `[[people]]` name; the audit log
    keeps the account."""
    node, _ = await team_node(node_factory, tmp_path, {
        "people": [{"name": "Alice", "accounts": ["web:alice"]}]})
    task = await start(node, "ping the hook", steps=hook(echo))
    assert task.approval is not None
    outcome = await node.flow.on_decision(DecisionEvent(
        approval_id=task.approval.id, scope=Scope.ONCE, actor=Actor("web", "alice"),
        surface="web"))
    assert outcome.accepted, outcome.message
    [line] = [t for t in await team_lines(node) if t.startswith("👍 approved")]
    assert "— by Alice [" in line, line
    events = (await node.store.audit_events(task_id=task.id)).items
    assert [e.actor for e in events if e.kind == "decision"] == ["web:alice"]


async def test_a_session_grant_is_announced_as_auto_approved(
        node_factory: NodeFactory, tmp_path: Path, echo: HttpEcho) -> None:
    """The second identical webhook runs under the session grant: an `auto_approved` line
    names the grant, so a message that went out without a person is never silent."""
    node, heard = await team_node(node_factory, tmp_path)
    task = await start(node, "ping twice", steps=hook(echo) * 2)
    assert task.state is TaskState.WAITING_APPROVAL
    done = await decide(node, Scope.SESSION)
    assert done.state is TaskState.COMPLETED
    [(_, why)] = [e for e in heard.events if e[0] == "auto_approved"]
    assert why is not None and why.startswith("session grant g-"), why
    [line] = [t for t in await team_lines(node) if "auto approved" in t]
    assert line.startswith("🤖 auto approved: ping twice — send_webhook → "), line
    assert "— by session grant g-" in line


async def test_yolo_and_cron_approve_are_announced(node_factory: NodeFactory,
                                                   tmp_path: Path, echo: HttpEcho) -> None:
    """A yolo run and a scheduled run under cron_mode approve each announce the action
    they let through, saying which rule did."""
    schedule = {"schedules": [{"name": "nightly", "cron": "0 3 * * *", "cron_mode": "approve",
                               "steps": [{"tool": "send_webhook", "args": {
                                   "url": echo.url("/hook"), "payload": {}}}]}]}
    node, heard = await team_node(node_factory, tmp_path, schedule)
    done = await start(node, "ping yolo", steps=hook(echo), mode=RunMode.YOLO)
    assert done.state is TaskState.COMPLETED
    assert node.scheduler is not None
    queued = await node.scheduler.run_now("nightly")
    cfg = node.engine.config
    claimed = await node.store.claim_next(cfg.node_id, node.engine.clock.now() + cfg.lease)
    assert claimed is not None and claimed.id == queued.id
    assert (await node.engine.advance(claimed)).state is TaskState.COMPLETED
    assert [why for kind, why in heard.events if kind == "auto_approved"] == [
        "yolo", "cron_mode = approve"]


async def test_an_agent_call_under_cron_approve_is_announced(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """An agent's gated call that cron_mode approve lets through is announced too."""
    script = steps(Answer(content="Removing it.", calls=[("delete_file", {"path": "old.txt"})]),
                   Answer(content="Done."))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work", extra={
            "schedules": [{"name": "cleanup", "cron": "0 3 * * *", "goal": "tidy up",
                           "cron_mode": "approve"}]})
        (tmp_path / "work" / "old.txt").write_text("old")
        heard = Heard()
        node.listener.add(heard)
        assert node.scheduler is not None
        await node.scheduler.run_now("cleanup")
        cfg = node.engine.config
        claimed = await node.store.claim_next(cfg.node_id, node.engine.clock.now() + cfg.lease)
        assert claimed is not None
        done = await node.engine.advance(claimed)
    assert done.state is TaskState.COMPLETED
    assert ("auto_approved", "cron_mode = approve") in heard.events
    assert heard.kinds().count("started") == 1


async def test_no_auto_approved_line_for_a_person_s_approval(
        node_factory: NodeFactory, tmp_path: Path, echo: HttpEcho) -> None:
    """An action a person approved is announced as approved, never as auto_approved."""
    node, heard = await team_node(node_factory, tmp_path)
    await start(node, "ping the hook", steps=hook(echo))
    await last_card_ref(node)
    await decide(node, Scope.ONCE)
    assert "approved" in heard.kinds() and "auto_approved" not in heard.kinds()


async def test_a_smart_approval_is_announced(node_factory: NodeFactory) -> None:
    """An action the smart-approval judge let through is an `auto_approved` line that
    says so."""
    async with FakeJudge("APPROVE") as judge:
        node = await node_factory({"approvals": {"mode": "smart"},
                                   "planner": {"base_url": judge.base_url, "model": "judge"}},
                                  store=MemTaskStore())
        node.registry.register(NoopTool(name="notify_team", capability="team.notify",
                                        risk=RiskClass.SEND))
        notifier = node.flow.notifier
        assert notifier is not None
        notifier.rules = [NotifyRule(platform="recording", channel="team", events=ALL)]
        notifier.window = notifier.window * 0
        task = await factory_start(node, [noop("x", tool="notify_team")])
    assert task.state is TaskState.COMPLETED
    [line] = [t for t in await team_lines(node) if "auto approved" in t]
    assert "notify_team" in line and line.split(" [")[0].endswith("— by smart approval")
