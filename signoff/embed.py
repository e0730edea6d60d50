"""The embeddable `Agent`: ``await Agent.from_config(path, planner=...).handle(goal)``.

It uses the very engine, policy and approval flow the daemon uses, with no surface: a
gated action leaves the task `waiting_approval`, and `resume` answers it (seed section 9).
`signoff handle` (`signoff/cli/handle.py`) runs the same node with the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from signoff.config import preflight
from signoff.config.settings import Settings, load_settings
from signoff.runtime.models import Action, JsonDict, Scope, Task, TaskState
from signoff.runtime.planning.planner import Planner
from signoff.wiring import Node, build_node, build_registry


@dataclass(frozen=True)
class Report:
    """The outcome of one goal: a human summary and the task in its API shape."""

    summary: str
    task: JsonDict

    @property
    def state(self) -> str:
        """The task's final (or waiting) state."""
        return str(self.task["state"])


def summarize(task: Task) -> str:
    """One paragraph a person can read at the end of a run."""
    done = sum(1 for a in task.actions if a.outcome == "ok")
    reason = (task.result or {}).get("reason")
    if task.state is TaskState.COMPLETED:
        answer = (task.result or {}).get("answer")  # an agent's final words
        return f"completed: {done} action(s) ran" + (f"\nanswer: {answer}" if answer else "")
    if task.state is TaskState.WAITING_APPROVAL and task.pending_action:
        return (f"waiting for approval: {task.pending_action.tool} "
                f"{', '.join(task.pending_action.targets)} ({done} action(s) ran)")
    return f"{task.state.value}: {reason or 'unknown reason'} ({done} action(s) ran)"


class Agent:
    """Embed signoff: ``await Agent.from_config(path, planner=...).handle(goal)``."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._opened = False

    @classmethod
    def from_config(cls, path: str | Path | None = None, *, planner: Planner | None = None,
                    **overrides: Any) -> Agent:
        """Build from a config file (None: embedded defaults); inject any planner.

        The file gets the checks of `signoff handle` (`signoff.config.preflight`): ConfigError.
        """
        settings = load_settings(path) if path else Settings.default()
        preflight.check(settings, build_registry(settings, overrides.get("work_dir")),
                        path=path, serving=False)
        return cls(build_node(settings, planner=planner, **overrides))

    async def _open(self) -> None:
        if not self._opened:
            await self.node.store.open()
            await self.node.mcp.start()
            self._opened = True

    async def handle(self, goal: str, *, steps: Sequence[Action] | None = None,
                     prohibit: Sequence[str] = ()) -> Report:
        """Plan and run a goal; SEND/DESTRUCTIVE actions leave it `waiting_approval`."""
        await self._open()
        task = await self.node.engine.submit(goal, steps=steps, prohibit=prohibit, claim=True,
                                             submitted_by="cli:embedded")
        assert task is not None
        task = await self.node.engine.advance(task)
        return Report(summarize(task), task.public())

    async def resume(self, task_id: str, *, approved: bool = True, scope: str = "once",
                     reason: str | None = None) -> Report:
        """Answer the pending request and run the stored action (never re-planned)."""
        await self._open()
        task = await self.node.store.get_task(task_id)
        if task is None or task.approval is None:
            raise LookupError(f"no task {task_id} waiting for approval")
        chosen = Scope(scope) if approved else Scope.DENY
        await self.node.decider.decide(task.approval.id, chosen, "cli:embedded", reason=reason)
        # Approved, it is handed over to the node's worker, which runs no consumers here.
        ready = self.node.worker.take_ready(task_id)
        if ready is not None:
            task = await self.node.engine.advance(ready)
        else:
            task = await self.node.store.get_task(task_id) or task
        return Report(summarize(task), task.public())

    async def close(self) -> None:
        """Stop the MCP servers and release the database."""
        await self.node.mcp.stop()
        await self.node.store.close()
