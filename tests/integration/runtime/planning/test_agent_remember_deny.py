"""An agent that asks again for a call a person denied: the very same call (fingerprint
and content) is refused at once without a new card, within approvals.remember_deny; a
changed message is a new question, and "0" turns the memory off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from signoff.runtime.models import Scope, TaskState
from tests.agentkit import agent_node, decide, recorder, start, tool_results
from tests.conftest import NodeFactory
from tests.fakes.openai import Answer, FakeOpenAI, steps

HOOK = "http://127.0.0.1:9/hook"


def hook(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("send_webhook", {"url": HOOK, "payload": payload})


SAME_THEN_CHANGED = steps(Answer(calls=[hook({"n": 1})]), Answer(calls=[hook({"n": 1})]),
                          Answer(calls=[hook({"n": 2})]), Answer(content="done"))


async def test_the_same_call_is_refused_at_once_and_a_changed_one_asks_again(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """Denied, then asked unchanged: "denied earlier", no card; with another payload: a
    new card."""
    async with FakeOpenAI(script=SAME_THEN_CHANGED) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        await start(node, "ping the hook")
        task = await decide(node, Scope.DENY)
        await node.flow.dispatcher.run_once()
    assert task.state is TaskState.WAITING_APPROVAL
    assert tool_results(llm.requests[2])[-1] == {
        "error": "not approved: blocked: denied earlier in this task"}
    assert task.pending_action is not None and task.pending_action.args["payload"] == {"n": 2}
    assert len(recorder(node).messages) == 2


async def test_remember_deny_zero_asks_every_time(node_factory: NodeFactory,
                                                  tmp_path: Path) -> None:
    """approvals.remember_deny = "0": the unchanged call gets a new card."""
    async with FakeOpenAI(script=SAME_THEN_CHANGED) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work",
                                extra={"approvals": {"remember_deny": "0"}})
        await start(node, "ping the hook")
        task = await decide(node, Scope.DENY)
        await node.flow.dispatcher.run_once()
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None and task.pending_action.args["payload"] == {"n": 1}
    assert len(recorder(node).messages) == 2


async def test_the_reply_under_a_denied_card_says_the_run_had_a_refusal(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """An agent told of a deny finishes; the reply under the card says "completed, 1
    action refused", not a bare "completed"."""
    script = steps(Answer(calls=[hook({"n": 1})]), Answer(content="could not ping"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        await start(node, "ping the hook")
        done = await decide(node, Scope.DENY)
        await node.flow.dispatcher.run_once()
    assert done.state is TaskState.COMPLETED
    replies = [text for _, text, thread in recorder(node).notes if thread is not None]
    assert replies == [f"Task {done.id} completed, 1 action refused"]
