"""Helpers for the agent-mode tests: a node pointed at a scripted OpenAI-compatible fake,
a work dir with a notes file, and short ways to run, decide and read a task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from signoff.bot.ports import CardRef
from signoff.runtime.models import Scope, Task
from signoff.runtime.transcript import TranscriptEntry
from signoff.testing import RecordingSurface
from signoff.wiring import Node
from tests.conftest import NodeFactory, deep_merge

NOTES = "Meeting moved to 3pm\nsecond line\n"


def agent_config(base_url: str, work: Path, **planner: Any) -> dict[str, Any]:
    """Settings of a node whose planner is the agent at ``base_url``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "notes.txt").write_text(NOTES)
    return {"daemon": {"work_dir": str(work)},
            "planner": {"kind": "openai", "base_url": base_url, "model": "llama3.1",
                        "timeout": "5s", **planner}}


async def agent_node(node_factory: NodeFactory, base_url: str, work: Path,
                     extra: dict[str, Any] | None = None, **planner: Any) -> Node:
    """An opened node in agent mode with a RecordingSurface."""
    return await node_factory(deep_merge(agent_config(base_url, work, **planner), extra or {}))


async def start(node: Node, goal: str, **kw: Any) -> Task:
    """Submit a goal and run it until it waits, completes or fails."""
    task = await node.engine.submit(goal, claim=True, **kw)
    assert task is not None
    return await node.engine.advance(task)


def recorder(node: Node) -> RecordingSurface:
    """The node's recording surface."""
    platform = node.surfaces["recording"]
    assert isinstance(platform, RecordingSurface)
    return platform


async def last_card_ref(node: Node) -> CardRef:
    """Deliver queued cards; the newest card's reference."""
    await node.flow.dispatcher.run_once()
    platform = recorder(node)
    return CardRef(platform.name, "recording", max(platform.messages, key=int))


async def decide(node: Node, scope: Scope, reason: str | None = None) -> Task:
    """Answer the newest card as recording:alice, then run the task on."""
    ref = await last_card_ref(node)
    outcome = await recorder(node).click(ref, scope, "alice", reason=reason)
    assert outcome.accepted, outcome.message
    return await node.engine.advance(await node.worker._ready.get())


async def transcript(node: Node, task_id: str) -> list[TranscriptEntry]:
    """Every stored message of a task."""
    page = await node.store.transcript(task_id, limit=10_000)
    return list(page.items)


def tool_results(body: dict[str, Any]) -> list[Any]:
    """The decoded tool messages of one request the model received."""
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
