"""The engine on the in-memory store: planning once, running safe steps, pausing,
resuming the stored action, denying, blocking and recovering after a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from signoff.config.settings import Settings
from signoff.embed import Agent
from signoff.errors import BadArguments
from signoff.runtime.models import Action, RiskClass, RunMode, Scope, TaskState
from signoff.runtime.store.memory import MemTaskStore
from signoff.wiring import Node, build_node


class CountingPlanner:
    """Plans read → draft → send, and counts how often it is asked (seed 9.1)."""

    def __init__(self, actions: list[Action] | None = None) -> None:
        self.calls = 0
        self.actions = actions or [
            Action(tool="read_file", args={"path": "README.md", "query": "metadata"}),
            Action(tool="write_file", args={"path": "draft.txt", "content": "draft"}),
            Action(tool="delete_file", args={"path": "old.txt", "name": "x"}),
        ]

    def plan(self, goal: str, **kwargs: Any) -> list[Action]:
        self.calls += 1
        return list(self.actions)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A work dir with a README and a file to delete."""
    wd = tmp_path / "work"
    wd.mkdir()
    (wd / "README.md").write_text("hello")
    (wd / "old.txt").write_text("old")
    return wd


def make(work: Path, planner: Any = None, **settings: Any) -> Node:
    data: dict[str, Any] = {"daemon": {"work_dir": str(work)}, **settings}
    return build_node(Settings.model_validate(data), store=MemTaskStore(), planner=planner)


async def run(node: Node, goal: str = "tidy up", **kw: Any):
    task = await node.engine.submit(goal, claim=True, **kw)
    assert task is not None
    return await node.engine.advance(task)


async def test_safe_steps_run_and_gated_step_waits_with_the_action_stored(work: Path) -> None:
    """READ and DRAFT run on their own; DESTRUCTIVE pauses with the pending action stored."""
    node = make(work, CountingPlanner())
    task = await run(node)
    assert task.state is TaskState.WAITING_APPROVAL
    assert (work / "draft.txt").read_text() == "draft"
    assert task.pending_action is not None and task.pending_action.tool == "delete_file"
    assert task.pending_action.risk is RiskClass.DESTRUCTIVE
    assert task.approval is not None and task.approval.status.value == "pending"
    stored = await node.store.get_task(task.id)
    assert stored is not None and stored.pending_action == task.pending_action
    assert (work / "old.txt").exists()


async def test_planner_metadata_args_are_dropped_before_the_tool_runs(work: Path) -> None:
    """Extra keys such as `query` and `name` from a planner never reach the tool (seed 8)."""
    node = make(work, CountingPlanner())
    task = await run(node)
    assert task.actions[0].args == {"path": "README.md"}
    assert task.pending_action is not None and task.pending_action.args == {"path": "old.txt"}


async def test_resume_runs_the_stored_action_and_never_replans(work: Path) -> None:
    """Approving runs the stored action and the remaining steps; the planner was asked once."""
    planner = CountingPlanner()
    agent = Agent(make(work, planner))
    report = await agent.handle("tidy up")
    assert report.state == "waiting_approval"
    done = await agent.resume(report.task["id"], approved=True)
    assert done.state == "completed"
    assert planner.calls == 1
    assert not (work / "old.txt").exists()
    assert [a["tool"] for a in done.task["actions"]] == ["read_file", "write_file", "delete_file"]
    assert isinstance(done.task["result"], dict)


async def test_deny_fails_the_task_with_user_denied(work: Path) -> None:
    """A deny fails the task with reason "user denied" and touches nothing."""
    agent = Agent(make(work, CountingPlanner()))
    report = await agent.handle("tidy up")
    denied = await agent.resume(report.task["id"], approved=False)
    assert denied.state == "failed"
    assert denied.task["result"]["reason"] == "user denied"
    assert (work / "old.txt").exists()


async def test_deny_with_a_reason_is_reported(work: Path) -> None:
    """A deny with a reason gives "user denied: <reason>"."""
    agent = Agent(make(work, CountingPlanner()))
    report = await agent.handle("tidy up")
    denied = await agent.resume(report.task["id"], approved=False, reason="not today")
    assert denied.task["result"]["reason"] == "user denied: not today"


async def test_a_planner_may_raise_a_risk_but_never_lower_it(work: Path) -> None:
    """Risk comes from the registry; a planner's higher risk is kept, a lower one ignored."""
    planner = CountingPlanner([
        Action(tool="write_file", args={"path": "a.txt", "content": "x"}, risk=RiskClass.SEND),
        Action(tool="delete_file", args={"path": "old.txt"}, risk=RiskClass.READ),
    ])
    task = await run(make(work, planner))
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None
    assert task.pending_action.tool == "write_file"
    assert task.pending_action.risk is RiskClass.SEND
    assert not (work / "a.txt").exists()


async def test_unknown_tool_in_steps_is_refused_at_submission(work: Path) -> None:
    """Explicit steps are checked up front; the error names the step."""
    node = make(work)
    with pytest.raises(BadArguments, match=r"steps\[1\].*frobnicate"):
        await node.engine.submit("x", steps=[Action(tool="read_file", args={"path": "a"}),
                                             Action(tool="frobnicate")])
    assert (await node.store.list_tasks()).items == []


async def test_missing_required_arg_is_refused_and_named(work: Path) -> None:
    """A step without a required argument is a clear error naming it."""
    node = make(work)
    with pytest.raises(BadArguments, match="path"):
        await node.engine.submit("x", steps=[Action(tool="write_file", args={"content": "x"})])


async def test_path_escaping_the_work_dir_fails_the_action_and_touches_nothing(
        work: Path, tmp_path: Path) -> None:
    """`..`, absolute paths outside and symlinks out fail the action; nothing is written."""
    outside = tmp_path / "outside.txt"
    (work / "link").symlink_to(tmp_path)
    node = make(work)
    for path in ("../outside.txt", str(outside), "link/outside.txt"):
        task = await run(node, steps=[Action(tool="write_file",
                                             args={"path": path, "content": "pwned"})])
        assert task.state is TaskState.FAILED, path
        assert "work dir" in task.result["reason"], task.result
        assert not outside.exists()


async def test_no_recipe_for_the_goal_fails_with_a_clear_reason(work: Path) -> None:
    """With no matching recipe the task fails and says how to fix it."""
    task = await run(make(work), goal="make coffee")
    assert task.state is TaskState.FAILED
    assert "no recipe matches" in task.result["reason"]


async def test_recipes_plan_goals_from_config(work: Path) -> None:
    """A `[[recipes]]` entry whose pattern matches the goal provides the steps."""
    node = make(work, recipes=[{"name": "readme", "match": "summar",
                                "steps": [{"tool": "read_file", "args": {"path": "README.md"}}]}])
    task = await run(node, goal="Summarize the README")
    assert task.state is TaskState.COMPLETED
    assert task.result["outputs"][0]["output"]["content"] == "hello"


async def test_prohibited_risk_class_blocks_and_no_approval_can_override(work: Path) -> None:
    """A task that prohibits SEND gets BLOCK for a send, never a request."""
    steps = [Action(tool="send_webhook", args={"url": "http://127.0.0.1:9/x", "payload": {}})]
    task = await run(make(work), steps=steps, prohibit=["SEND"])
    assert task.state is TaskState.FAILED
    assert task.result["reason"].startswith("blocked: prohibited by the task")
    assert task.approval is None


async def test_non_interactive_run_fails_closed(work: Path) -> None:
    """With nobody to answer, ASK_USER becomes BLOCK."""
    node = make(work)
    steps = [Action(tool="delete_file", args={"path": "old.txt"})]
    task = await run(node, steps=steps, mode=RunMode.NON_INTERACTIVE)
    assert task.state is TaskState.FAILED
    assert task.result["reason"].startswith("blocked:")
    assert (work / "old.txt").exists()


async def test_session_grant_covers_the_same_action_later_in_the_task(work: Path) -> None:
    """After `session`, the same exact action in the same task runs without asking again."""
    (work / "b.txt").write_text("b")
    node = make(work)
    steps = [Action(tool="run_command", args={"command": "true"}),
             Action(tool="run_command", args={"command": "true"}),
             Action(tool="run_command", args={"command": "false"})]
    task = await run(node, steps=steps)
    assert task.approval is not None
    result = await node.decider.decide(task.approval.id, Scope.SESSION, "web:admin")
    assert result.accepted
    resumed = await node.engine.advance(result.task)
    assert resumed.state is TaskState.WAITING_APPROVAL, "a different command asks again"
    assert resumed.pending_action is not None
    assert resumed.pending_action.args == {"command": "false"}
    assert [a.decision for a in resumed.actions] == ["approved:session", "grant"]


async def test_recovery_requeues_in_progress_tasks_and_counts_retries(work: Path) -> None:
    """An in-progress task of a dead node goes back to queued with retries + 1."""
    node = make(work)
    task = await node.engine.submit("x", steps=[Action(tool="read_file",
                                                       args={"path": "README.md"})], claim=True)
    assert task is not None and task.state is TaskState.IN_PROGRESS
    await node.engine.recover()
    again = await node.store.get_task(task.id)
    assert again is not None and again.state is TaskState.QUEUED and again.retries == 1


async def test_recovery_past_max_retries_fails_the_task(work: Path) -> None:
    """Past daemon.max_retries the task fails with "max retries exceeded"."""
    node = make(work)
    task = await node.engine.submit("x", steps=[Action(tool="read_file",
                                                       args={"path": "README.md"})], claim=True)
    assert task is not None
    await node.engine.recover()
    claimed = await node.store.claim_next(node.engine.config.node_id, task.created_at)
    assert claimed is not None
    await node.engine.recover()
    failed = await node.store.get_task(task.id)
    assert failed is not None and failed.state is TaskState.FAILED
    assert failed.result == {"reason": "max retries exceeded", "step": 0}


async def test_interrupted_gated_action_comes_back_for_a_new_decision(work: Path) -> None:
    """A SEND/DESTRUCTIVE action cut short by a crash is not re-run blindly."""
    node = make(work)
    task = await run(node, steps=[Action(tool="delete_file", args={"path": "old.txt"})])
    assert task.approval is not None
    result = await node.decider.decide(task.approval.id, Scope.ONCE, "web:admin")
    claimed = result.task
    assert claimed is not None
    claimed.executing = claimed.pending_action  # what _run_gated commits before running
    claimed.pending_action = None
    await node.engine.save(claimed)
    await node.engine.recover()
    back = await node.store.get_task(task.id)
    assert back is not None and back.state is TaskState.WAITING_APPROVAL
    assert back.approval is not None and back.approval.note == "outcome unknown after a crash"
    assert back.approval.id != task.approval.id
    assert (work / "old.txt").exists()


async def test_waiting_tasks_are_left_alone_by_recovery(work: Path) -> None:
    """Recovery never touches a task that waits for a person."""
    node = make(work)
    task = await run(node, steps=[Action(tool="delete_file", args={"path": "old.txt"})])
    await node.engine.recover()
    same = await node.store.get_task(task.id)
    assert same is not None and same.state is TaskState.WAITING_APPROVAL
    assert same.retries == 0


class ToolsOnlyPlanner:
    """A planner written as ``plan(goal, tools)``: it names the one context it wants."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def plan(self, goal: str, tools: list[dict[str, Any]]) -> list[Action]:
        self.seen = [t["function"]["name"] for t in tools]
        return [Action(tool="read_file", args={"path": "README.md"})]


async def test_a_planner_gets_only_the_context_it_names(work: Path) -> None:
    """Context the engine adds later (such as `notes`) never breaks a planner that does
    not take **kwargs."""
    planner = ToolsOnlyPlanner()
    task = await run(make(work, planner))
    assert task.state is TaskState.COMPLETED
    assert "read_file" in planner.seen


async def test_a_failed_webhook_says_what_failed_once(work: Path) -> None:
    """An approved webhook to a closed port fails with one "send_webhook failed: <url>: …",
    not "send_webhook failed: send_webhook … failed: …"."""
    node = make(work, approvals={"mode": "off"})
    url = "http://127.0.0.1:9/hook"
    task = await run(node, steps=[Action(tool="send_webhook",
                                         args={"url": url, "payload": {"a": 1}})])
    assert task.state is TaskState.FAILED and task.result is not None
    reason = task.result["reason"]
    assert reason.startswith(f"send_webhook failed: {url}: "), reason
    assert reason.count("send_webhook") == 1 and f"{url} failed" not in reason, reason
