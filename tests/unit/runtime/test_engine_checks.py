"""Actions that can never succeed fail before anyone is asked: no card, no request, audited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from signoff.config.settings import Settings
from signoff.errors import BadArguments
from signoff.runtime.models import Action, RiskClass, Task, TaskState
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.tools.base import Param, ToolContext
from signoff.testing import RecordingSurface
from signoff.wiring import Node, build_node


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A work dir with a file, a symlink out of it, and a file outside it."""
    wd = tmp_path / "work"
    wd.mkdir()
    (wd / "old.txt").write_text("old")
    (tmp_path / "outside.txt").write_text("keep me")
    (wd / "out").symlink_to(tmp_path)
    return wd


def make(work: Path, *surfaces: str) -> tuple[Node, RecordingSurface]:
    """A node whose only card surface is a recorder; ``surfaces`` are extra chat names."""
    recorder = RecordingSurface()
    chosen: dict[str, Any] = {"recording": recorder}
    chosen.update({name: RecordingSurface(name=name) for name in surfaces})
    settings = Settings.model_validate({"daemon": {"work_dir": str(work)}})
    return build_node(settings, store=MemTaskStore(), surfaces=chosen), recorder


async def run(node: Node, *steps: Action) -> Task:
    task = await node.engine.submit("try it", steps=list(steps), claim=True)
    assert task is not None
    task = await node.engine.advance(task)
    await node.flow.dispatcher.run_once()
    return task


async def assert_refused_unasked(node: Node, recorder: RecordingSurface, task: Task,
                                 problem: str) -> None:
    """Failed with ``problem`` in the reason, one audited refusal, and nobody was asked."""
    assert task.state is TaskState.FAILED
    reason = str(task.result["reason"])
    assert reason.startswith(f"{task.actions[-1].tool} failed: ") and problem in reason, reason
    assert task.approval is None and task.pending_action is None
    assert (await node.store.pending_approvals()).items == []
    assert recorder.messages == {}
    events = (await node.store.audit_events(task_id=task.id)).items
    refusals = [e for e in events if e.decision == "BLOCK" and e.actor == "auto:check"]
    assert len(refusals) == 1 and problem in str(refusals[0].reason)
    assert not [e for e in events if e.decision == "ASK_USER"]


@pytest.mark.parametrize(("path", "problem"), [
    ("../outside.txt", "leaves the work dir"),
    ("ABS", "leaves the work dir"),
    ("out/outside.txt", "through a symlink"),
])
async def test_delete_outside_the_work_dir_fails_without_a_card(work: Path, path: str,
                                                                 problem: str) -> None:
    """delete_file of `..`, an absolute path outside or a symlink out is never asked about."""
    node, recorder = make(work)
    target = str(work.parent / "outside.txt") if path == "ABS" else path
    task = await run(node, Action(tool="delete_file", args={"path": target}))
    await assert_refused_unasked(node, recorder, task, problem)
    assert (work.parent / "outside.txt").read_text() == "keep me"


@pytest.mark.parametrize("cwd", ["..", "/", "out"])
async def test_run_command_with_a_cwd_outside_fails_without_a_card(work: Path, cwd: str) -> None:
    """run_command whose cwd leaves the work dir is refused before anyone is asked."""
    node, recorder = make(work)
    task = await run(node, Action(tool="run_command", args={"command": "rm old.txt", "cwd": cwd}))
    await assert_refused_unasked(node, recorder, task, "leaves the work dir")
    assert (work / "old.txt").exists()


@pytest.mark.parametrize(("channel", "problem"), [
    ("telegram:-100123", "no telegram surface is running"),
    ("slack:#general", "is not a conversation id"),
    ("irc:#ops", "names no chat surface"),
])
async def test_post_message_to_a_channel_nothing_reaches_fails_without_a_card(
        work: Path, channel: str, problem: str) -> None:
    """A channel no configured surface can reach, or a malformed one, is refused at once."""
    node, recorder = make(work, "slack")
    task = await run(node, Action(tool="post_message", args={"channel": channel, "text": "hi"}))
    await assert_refused_unasked(node, recorder, task, problem)


async def test_a_reachable_channel_is_still_asked_about(work: Path) -> None:
    """With a Slack surface, post_message to slack:C… waits for a person as before."""
    node, recorder = make(work, "slack")
    task = await run(node, Action(tool="post_message", args={"channel": "slack:C0NEWS",
                                                             "text": "hi"}))
    assert task.state is TaskState.WAITING_APPROVAL
    assert len(recorder.messages) == 1


async def test_earlier_safe_steps_ran_and_the_refusal_names_the_step(work: Path) -> None:
    """A READ step before the refused one runs; the record says who refused and why."""
    node, _ = make(work)
    task = await run(node, Action(tool="read_file", args={"path": "old.txt"}),
                     Action(tool="delete_file", args={"path": "../outside.txt"}))
    assert [(r.tool, r.outcome) for r in task.actions] == [("read_file", "ok"),
                                                            ("delete_file", "error")]
    last = task.actions[-1]
    assert last.decided_by == "auto:check" and "leaves the work dir" in str(last.error)
    assert task.result["step"] == 1


class PickyTool:
    """A plugin whose own check rejects every value but "ok"."""

    name = "picky"
    capability = "test.picky"
    description = "Refuses anything but ok."
    params = (Param("value", str),)

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.DESTRUCTIVE

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return dict(args)

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return (args["value"],)

    async def check(self, args: dict[str, Any], ctx: ToolContext) -> None:
        if args["value"] != "ok":
            raise BadArguments(f"picky: value {args['value']!r} is not ok")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {"ran": True}


async def test_a_plugins_own_check_refuses_before_asking(work: Path) -> None:
    """A tool argument the tool's check rejects fails the task; an accepted one is asked."""
    node, recorder = make(work)
    node.registry.register(PickyTool())
    task = await run(node, Action(tool="picky", args={"value": "nope"}))
    await assert_refused_unasked(node, recorder, task, "value 'nope' is not ok")
    task = await run(node, Action(tool="picky", args={"value": "ok"}))
    assert task.state is TaskState.WAITING_APPROVAL


async def test_wrong_type_or_missing_argument_from_a_planner_is_never_asked(work: Path) -> None:
    """A planned call with a wrong type or no required argument fails before any card."""

    class Planner:
        def plan(self, goal: str, **kwargs: Any) -> list[Action]:
            return [Action(tool="delete_file", args={"path": 3})]

    settings = Settings.model_validate({"daemon": {"work_dir": str(work)}})
    recorder = RecordingSurface()
    node = build_node(settings, store=MemTaskStore(), planner=Planner(),
                      surfaces={"recording": recorder})
    task = await node.engine.submit("tidy", claim=True)
    assert task is not None
    task = await node.engine.advance(task)
    await node.flow.dispatcher.run_once()
    assert task.state is TaskState.FAILED
    assert "argument 'path' must be string" in str(task.result["reason"])
    assert recorder.messages == {} and (await node.store.pending_approvals()).items == []
