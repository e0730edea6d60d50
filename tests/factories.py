"""Small builders for tests: one action per built-in tool, tasks, and tiny custom tools.

    steps = [email("john@example.com"), delete("old.txt")]
    task = await node.engine.submit("goal", steps=steps, claim=True)

Actions come back unprepared (as a planner or a request would give them); the engine or
``registry.prepare`` labels them with risk, capability, targets and fingerprint.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from signoff.bot.ports import CardRef, DecisionOutcome
from signoff.runtime.models import Action, AuditEvent, RiskClass, RunMode, Scope, Task, TaskState
from signoff.runtime.tools.base import Param, ToolContext
from signoff.testing import RecordingSurface
from signoff.wiring import Node
from tests.fakes.openai import FakeOpenAI


def email(to: str | list[str] = "john@example.com", *, subject: str = "Weekly report",
          body: str = "Hi, here is the report.", cc: str | list[str] | None = None) -> Action:
    """A send_email action (SEND, fingerprint: the sorted recipients)."""
    args: dict[str, Any] = {"to": to, "subject": subject, "body": body}
    if cc is not None:
        args["cc"] = cc
    return Action(tool="send_email", args=args)


def webhook(url: str = "https://hooks.example.com/x", payload: Any = None) -> Action:
    """A send_webhook action (SEND, fingerprint: the URL)."""
    return Action(tool="send_webhook", args={"url": url, "payload": payload or {"n": 1}})


def post(channel: str = "slack:C123", text: str = "hello") -> Action:
    """A post_message action (SEND, fingerprint: the channel)."""
    return Action(tool="post_message", args={"channel": channel, "text": text})


def write(path: str = "notes.txt", content: str = "draft") -> Action:
    """A write_file action (DRAFT, fingerprint: the path)."""
    return Action(tool="write_file", args={"path": path, "content": content})


def delete(path: str = "old.txt") -> Action:
    """A delete_file action (DESTRUCTIVE, fingerprint: the path)."""
    return Action(tool="delete_file", args={"path": path})


def read(path: str = "notes.txt") -> Action:
    """A read_file action (READ)."""
    return Action(tool="read_file", args={"path": path})


def listdir(path: str = ".") -> Action:
    """A list_dir action (READ)."""
    return Action(tool="list_dir", args={"path": path})


def fetch(url: str = "https://example.com/") -> Action:
    """An http_get action (READ)."""
    return Action(tool="http_get", args={"url": url})


def command(cmd: str = "python3 -c pass", cwd: str | None = None) -> Action:
    """A run_command action (DESTRUCTIVE unless listed in policy.read_only_commands)."""
    args: dict[str, Any] = {"command": cmd}
    if cwd is not None:
        args["cwd"] = cwd
    return Action(tool="run_command", args=args)


def task(goal: str = "a test goal", **fields: Any) -> Task:
    """A Task value (not stored) with sensible defaults; ``fields`` override any attribute."""
    values: dict[str, Any] = {"id": "t-test", "goal": goal, "state": TaskState.IN_PROGRESS,
                              "mode": RunMode.INTERACTIVE, "steps": []}
    values.update(fields)
    return Task(**values)


@dataclass
class NoopTool:
    """A custom tool that does nothing but count and time its runs.

    ``risk`` picks its class (READ runs unattended, SEND asks); the fingerprint is
    ``target``, so two calls with the same target are the same action.
    """

    name: str = "noop"
    capability: str = "test.noop"
    risk: RiskClass = RiskClass.READ
    description: str = "Does nothing."
    params: tuple[Param, ...] = (Param("target", str, required=False),
                                 Param("text", str, required=False))
    runs: int = 0
    started: list[float] = field(default_factory=list)
    delay: float = 0.0

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        """Always the configured class."""
        return self.risk

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        """The target only (text is message content)."""
        return {"target": args.get("target", "")}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        """The target, if any."""
        return (args["target"],) if args.get("target") else ()

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Record the start time and the run."""
        self.started.append(time.perf_counter())
        self.runs += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        return {"ok": True}


def noop(target: str = "x", *, tool: str = "noop", text: str = "") -> Action:
    """An action of a `NoopTool` registered under ``tool``."""
    return Action(tool=tool, args={"target": target, "text": text})


# --- driving a node step by step (no background tasks, no sleeping) ----------------------


def run_inline(node: Node) -> list[Task]:
    """Make approved tasks continue inside the deciding call, as the worker would.

    Returns the list that collects every task advanced this way.
    """
    advanced: list[Task] = []

    async def advance(handed: Task) -> None:
        advanced.append(await node.engine.advance(handed))

    node.decider.settler.on_runnable = advance
    return advanced


async def start(node: Node, steps: list[Action], *, goal: str = "a test goal",
                **submit: Any) -> Task:
    """Submit explicit steps, advance until the task waits or ends, post any card."""
    run_inline(node)
    task = await node.engine.submit(goal, steps=steps, claim=True, **submit)
    assert task is not None
    task = await node.engine.advance(task)
    await node.flow.dispatcher.run_once()
    return task


def card_ref(node: Node, approval_id: str, surface: str = "recording") -> CardRef:
    """Where the card of ``approval_id`` was posted on a RecordingSurface."""
    platform = node.surfaces[surface]
    assert isinstance(platform, RecordingSurface)
    for message_id, message in platform.messages.items():
        if message.card.approval_id == approval_id:
            return CardRef(surface, "recording", message_id)
    raise AssertionError(f"no card posted for approval {approval_id}")


async def answer(node: Node, task_id: str, scope: Scope, *, user: str = "alice",
                 reason: str | None = None) -> tuple[DecisionOutcome, Task]:
    """Click ``scope`` on the task's current card; return the outcome and the stored task."""
    current = await node.store.get_task(task_id)
    assert current is not None and current.approval is not None, "nothing to answer"
    platform = node.surfaces["recording"]
    assert isinstance(platform, RecordingSurface)
    outcome = await platform.click(card_ref(node, current.approval.id), scope, user, reason)
    await node.flow.dispatcher.run_once()
    after = await node.store.get_task(task_id)
    assert after is not None
    return outcome, after


async def audit_log(node: Node) -> list[AuditEvent]:
    """Every audit event of the node's store, in chain order."""
    return await node.store.audit_chain(after=0, limit=1_000_000)


# --- an OpenAI-compatible judge for smart approval ---------------------------------------


class FakeJudge(FakeOpenAI):
    """A local OpenAI-compatible server whose every completion is ``answer``.

    ``answer = None`` makes it fail with HTTP 500. ``requests`` keeps each JSON body.
    """

    def __init__(self, answer: str | None = "APPROVE") -> None:
        super().__init__(answer)
