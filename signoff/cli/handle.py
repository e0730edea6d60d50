"""One-shot runs: `signoff handle` and the embeddable `Agent` (seed section 9).

Both use the very engine, policy and approval flow the daemon uses; only the surface
differs (the terminal, or nothing at all when embedded).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from signoff.adapters.terminal.platform import TerminalPlatform
from signoff.config.settings import Settings, load_settings
from signoff.runtime.models import Action, JsonDict, RunMode, Scope, Task, TaskState
from signoff.runtime.planning.planner import Planner
from signoff.wiring import Node, build_node

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 3


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
        return f"completed: {done} action(s) ran"
    if task.state is TaskState.WAITING_APPROVAL and task.pending_action:
        return (f"waiting for approval: {task.pending_action.tool} "
                f"{', '.join(task.pending_action.targets)} ({done} action(s) ran)")
    return f"{task.state.value}: {reason or 'unknown reason'} ({done} action(s) ran)"


def exit_code(task: Task) -> int:
    """The contract's exit codes for `signoff handle`."""
    if task.state is TaskState.COMPLETED:
        return EXIT_COMPLETED
    reason = str((task.result or {}).get("reason", ""))
    if reason.startswith(("blocked", "user denied", "approval timed out")):
        return EXIT_STOPPED
    if task.state is TaskState.WAITING_APPROVAL:
        return EXIT_STOPPED
    return EXIT_FAILED


@contextlib.asynccontextmanager
async def opened(node: Node) -> AsyncIterator[Node]:
    """The node's store open and its MCP servers started for one run; both closed after
    (the servers are stopped explicitly: they do not share our process group)."""
    await node.store.open()
    try:
        await node.mcp.start()
        yield node
    finally:
        try:
            await node.mcp.stop()
        finally:
            await node.store.close()


async def run_once(node: Node, goal: str, *, steps: Sequence[Action] | None, mode: RunMode,
                   terminal: TerminalPlatform | None = None,
                   submitted_by: str = "terminal:user") -> Task:
    """Run one goal to its end in this process (asking at the terminal if given)."""
    runnable: asyncio.Queue[Task] = asyncio.Queue()

    async def hand_over(task: Task) -> None:
        await runnable.put(task)

    node.decider.on_runnable = hand_over
    task = await node.engine.submit(goal, steps=steps, mode=mode, claim=True,
                                    submitted_by=submitted_by)
    assert task is not None  # a plain task has no fire time, so it cannot collide
    task = await node.engine.advance(task)
    while task.state is TaskState.WAITING_APPROVAL and terminal is not None:
        await node.flow.dispatcher.run_once()
        await terminal.ask_next(node.flow.on_decision)
        if not runnable.empty():
            task = await node.engine.advance(runnable.get_nowait())
        else:
            task = await node.store.get_task(task.id) or task
    if node.flow.notifier is not None:
        await node.flow.notifier.flush(force=True)  # no digest window in a one-shot run
    await node.flow.dispatcher.run_once()
    return task


class Agent:
    """Embed signoff: ``await Agent.from_config(path, planner=...).handle(goal)``."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._opened = False

    @classmethod
    def from_config(cls, path: str | Path | None = None, *, planner: Planner | None = None,
                    **overrides: Any) -> Agent:
        """Build from a config file (None: embedded defaults); inject any planner."""
        settings = load_settings(path) if path else Settings.default()
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
        runnable: asyncio.Queue[Task] = asyncio.Queue()

        async def hand_over(t: Task) -> None:
            await runnable.put(t)

        self.node.decider.on_runnable = hand_over
        chosen = Scope(scope) if approved else Scope.DENY
        await self.node.decider.decide(task.approval.id, chosen, "cli:embedded", reason=reason)
        if not runnable.empty():
            task = await self.node.engine.advance(runnable.get_nowait())
        else:
            task = await self.node.store.get_task(task_id) or task
        return Report(summarize(task), task.public())

    async def close(self) -> None:
        """Stop the MCP servers and release the database."""
        await self.node.mcp.stop()
        await self.node.store.close()
