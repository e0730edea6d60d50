"""One-shot runs: `signoff handle` (seed section 9).

It uses the very engine, policy and approval flow the daemon uses, asking at the
terminal; the embeddable `Agent` (`signoff/embed.py`) runs the same node with no surface.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence

from signoff.adapters.terminal.surface import TerminalSurface
from signoff.bot.cards import build_card
from signoff.runtime.models import (
    Action,
    ActionRecord,
    Approval,
    ApprovalStatus,
    RunMode,
    Task,
    TaskState,
)
from signoff.runtime.words import TIMED_OUT, USER_DENIED
from signoff.wiring import Node

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 0, 1, 2, 3


def exit_code(task: Task) -> int:
    """The contract's exit codes for `signoff handle`."""
    if task.state is TaskState.COMPLETED:
        return EXIT_COMPLETED
    reason = str((task.result or {}).get("reason", ""))
    if reason.startswith(("blocked", USER_DENIED, TIMED_OUT)):
        return EXIT_STOPPED
    if task.state is TaskState.WAITING_APPROVAL:
        return EXIT_STOPPED
    return EXIT_FAILED


EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process ended by SIGINT


def interrupted(task: Task | None) -> str:
    """The one line Ctrl-C leaves: which task, in what state, and what becomes of it."""
    if task is None:
        return "interrupted: no task was started"
    if task.state in (TaskState.PLANNING, TaskState.IN_PROGRESS):
        cut = f" (its {task.executing.tool} was cut short)" if task.executing else ""
        return (f"interrupted: task {task.id} stays {task.state.value}{cut}; `signoff daemon "
                f"start` here, or a daemon on this database once its lease runs out, takes "
                f"it up again and asks again about an action cut short")
    return f"interrupted: task {task.id} stays {task.state.value}"


POLL_SECONDS = 0.2  # how often a prompt looks for a decision made in another process


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
                   terminal: TerminalSurface | None = None,
                   submitted_by: str = "terminal:user",
                   on_action: Callable[[ActionRecord], None] | None = None,
                   started: Callable[[Task], None] | None = None) -> Task:
    """Run one goal to its end in this process (asking at the terminal if given).

    Each action that ran is shown (``on_action``, else the terminal). A prompt ends with
    the person's answer, Ctrl-C (a deny), the request's expiry ("approval timed out"), or
    a decision taken elsewhere on the same database (console, API); after an approval
    elsewhere the deciding daemon runs the action and this run reports how it ended.
    """
    show = on_action or (terminal.show_action if terminal is not None else None)
    task = await node.engine.submit(goal, steps=steps, mode=mode, claim=True,
                                    submitted_by=submitted_by)
    assert task is not None  # a plain task has no fire time, so it cannot collide
    if started is not None:
        started(task)  # so that Ctrl-C can say which task it left (`interrupted`)
    task = await node.engine.advance(task)
    shown = _show_actions(task, 0, show)
    console = node.settings.daemon.public_url
    while (task.state is TaskState.WAITING_APPROVAL and terminal is not None
           and task.approval is not None):
        await node.flow.dispatcher.run_once()
        approval = task.approval
        settled = functools.partial(_settled, node, approval)
        card = build_card(task, approval, console_url=console,
                          preview=await node.flow.preview(approval))
        await terminal.ask(card, node.flow.on_decision, settled=settled)
        # An approval here hands the task over to this node's worker, which runs no
        # consumers in a one-shot run: it is taken back and advanced here.
        ready = node.worker.take_ready(task.id)
        if ready is None:
            await _wait_hold(node, approval.id, terminal)
            ready = node.worker.take_ready(task.id)
        if ready is not None:
            task = await node.engine.advance(ready)
        else:
            task = await _settled_task(node, task, terminal)
        shown = _show_actions(task, shown, show)
    if node.flow.notifier is not None:
        await node.flow.notifier.flush(force=True)  # no digest window in a one-shot run
    await node.flow.dispatcher.run_once()
    return task


def _show_actions(task: Task, shown: int, show: Callable[[ActionRecord], None] | None) -> int:
    """Show the actions that ran (or failed) since the first ``shown``; the new count."""
    if show is not None:
        for record in task.actions[shown:]:
            if record.outcome in ("ok", "error"):
                show(record)
    return len(task.actions)


async def _settled(node: Node, approval: Approval) -> None:
    """Return once ``approval`` is no longer ours to answer: past its expiry (expired here,
    audited as auto:timeout) or decided in another process sharing the database."""
    while True:
        now = node.clock.now()
        if now >= approval.expires_at:
            await node.decider.expire_due()
            return
        current = await node.store.get_approval(approval.id)
        if current is None or current.status is not ApprovalStatus.PENDING:
            return
        left = (approval.expires_at - now).total_seconds()
        await asyncio.sleep(min(POLL_SECONDS, left))


async def _wait_hold(node: Node, approval_id: str, terminal: TerminalSurface) -> None:
    """An approval in its undo window (approvals.hold): say so, wait it out here and
    release it (the action then runs in this process), unless it is undone elsewhere
    meanwhile (console, API)."""
    while True:
        current = await node.store.get_approval(approval_id)
        if current is None or current.status is not ApprovalStatus.HELD:
            return
        task = await node.store.get_task(current.task_id) if current.task_id else None
        terminal.show_outcome(build_card(task, current))  # printed once
        now = node.clock.now()
        if current.hold_until is None or current.hold_until <= now:
            await node.decider.release_due()
            return
        await asyncio.sleep(min(POLL_SECONDS, (current.hold_until - now).total_seconds()))


async def _settled_task(node: Node, task: Task, terminal: TerminalSurface) -> Task:
    """The task after its request was settled elsewhere: the outcome is shown, and an
    approved action is left to the node that claimed it, until it stops or waits again."""
    while True:
        current = await node.store.get_task(task.id) or task
        if current.approval is not None and current.approval.status is not ApprovalStatus.PENDING:
            terminal.show_outcome(build_card(current, current.approval,
                                             console_url=node.settings.daemon.public_url))
        running = current.state in (TaskState.QUEUED, TaskState.IN_PROGRESS)
        lease = current.lease_until
        # A claim nobody renews any more (its node died) is not worth waiting for.
        if not running or (lease is not None and lease < node.clock.now()):
            return current
        await asyncio.sleep(POLL_SECONDS)
