"""The OpenAI-compatible planner against a local fake endpoint: tool calls become
actions with the registry's risk, and a failing endpoint falls back to the recipes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from signoff.config.settings import Settings
from signoff.runtime.models import Action, RiskClass, TaskState
from signoff.runtime.store.memory import MemTaskStore
from signoff.wiring import Node, build_node
from tests.fakes.openai import (
    ERROR_WITH_200,
    OLLAMA_NO_MODEL,
    VLLM_NO_TOOL_CHOICE,
    Answer,
    Failure,
    FakeOpenAI,
    steps,
)

RECIPE = {"name": "readme", "match": "readme",
          "steps": [{"tool": "read_file", "args": {"path": "README.md"}}]}


def node(tmp_path: Path, base_url: str) -> Node:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "README.md").write_text("hello")
    data: dict[str, Any] = {"daemon": {"work_dir": str(work)}, "recipes": [RECIPE],
                            "planner": {"kind": "openai", "mode": "plan", "base_url": base_url,
                                        "model": "llama3.1", "timeout": "5s"}}
    return build_node(Settings.model_validate(data), store=MemTaskStore())


async def plan(n: Node, goal: str):
    task = await n.engine.submit(goal, claim=True)
    assert task is not None
    return await n.engine.advance(task)


async def fallbacks(n: Node, task_id: str) -> list[Any]:
    """The task's audit events of kind planner_fallback."""
    page = await n.store.audit_events(task_id=task_id)
    return [e for e in page.items if e.kind == "planner_fallback"]


async def test_tool_calls_become_actions_with_the_registrys_risk(tmp_path: Path) -> None:
    """The model proposes calls; the registry decides risk; extra arguments are dropped."""
    reply = [("read_file", {"path": "README.md", "reason": "to summarize"}),
             ("send_email", {"to": "team@example.com", "subject": "s", "body": "b",
                             "risk": "READ"})]
    async with FakeOpenAI(reply) as llm:
        task = await plan(node(tmp_path, llm.base_url), "tell the team about the readme")
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.actions[0].args == {"path": "README.md"}
    assert task.pending_action is not None and task.pending_action.risk is RiskClass.SEND
    assert "risk" not in task.pending_action.args
    sent = llm.requests[0]
    assert sent["model"] == "llama3.1"
    names = {t["function"]["name"] for t in sent["tools"]}
    assert {"read_file", "send_email", "run_command"} <= names
    assert sent["messages"][-1] == {"role": "user", "content": "tell the team about the readme"}


async def test_a_failing_endpoint_falls_back_to_the_recipes(tmp_path: Path) -> None:
    """HTTP 500 from the model: the rules planner plans the goal instead."""
    async with FakeOpenAI(None) as llm:
        task = await plan(node(tmp_path, llm.base_url), "summarize the readme")
    assert task.state is TaskState.COMPLETED
    assert task.result is not None and task.result["outputs"][0]["tool"] == "read_file"


async def test_an_unreachable_endpoint_falls_back_too(tmp_path: Path) -> None:
    """Nothing listening: the recipes still plan the goal."""
    task = await plan(node(tmp_path, "http://127.0.0.1:9/v1"), "summarize the readme")
    assert task.state is TaskState.COMPLETED


async def test_malformed_arguments_fall_back_and_no_plan_fails_clearly(tmp_path: Path) -> None:
    """Arguments that are not JSON are not guessed at; with no recipe the task fails."""
    async with FakeOpenAI([("read_file", "{not json")]) as llm:
        task = await plan(node(tmp_path, llm.base_url), "do something else")
    assert task.state is TaskState.FAILED
    assert task.result is not None and "no recipe matches" in task.result["reason"]


async def test_the_fallback_is_recorded_on_the_task_and_audited(tmp_path: Path) -> None:
    """A fallback to the recipes is not silent: result.planner names it and the LLM error,
    and an audit event of kind planner_fallback records it."""
    async with FakeOpenAI(None) as llm:
        n = node(tmp_path, llm.base_url)
        task = await plan(n, "summarize the readme")
    assert task.state is TaskState.COMPLETED
    assert task.result is not None
    planner = task.result["planner"]
    assert (planner["kind"], planner["fallback"]) == ("openai", "recipes")
    assert llm.base_url in planner["error"] and "500" in planner["error"]
    [event] = await fallbacks(n, task.id)
    assert llm.base_url in (event.reason or "") and "recipes" in (event.reason or "")


async def test_when_no_recipe_matches_either_the_reason_names_the_llm_failure(
        tmp_path: Path) -> None:
    """LLM down and no recipe for the goal: the failure says both, and is still audited."""
    n = node(tmp_path, "http://127.0.0.1:9/v1")
    task = await plan(n, "do something else")
    assert task.state is TaskState.FAILED and task.result is not None
    reason = task.result["reason"]
    assert reason.startswith("planning failed: LLM endpoint http://127.0.0.1:9/v1 failed")
    assert "no recipe matches the goal" in reason
    assert task.result["planner"]["fallback"] == "recipes"
    assert len(await fallbacks(n, task.id)) == 1


async def test_a_plan_from_the_model_records_no_fallback(tmp_path: Path) -> None:
    """When the model plans, there is no fallback event and no fallback in the result."""
    async with FakeOpenAI([("read_file", {"path": "README.md"})]) as llm:
        n = node(tmp_path, llm.base_url)
        task = await plan(n, "summarize the readme")
    assert task.state is TaskState.COMPLETED and task.result is not None
    assert "fallback" not in task.result.get("planner", {})
    assert await fallbacks(n, task.id) == []


async def test_an_unknown_tool_from_the_model_fails_the_plan(tmp_path: Path) -> None:
    """A tool the registry does not know is refused; nothing runs."""
    async with FakeOpenAI([("launch_rockets", {})]) as llm:
        task = await plan(node(tmp_path, llm.base_url), "do something else")
    assert task.state is TaskState.FAILED
    assert task.result is not None and "launch_rockets" in task.result["reason"]


async def test_a_fallback_is_said_in_the_result_and_the_audit_log(tmp_path: Path) -> None:
    """Plan mode falling back to the recipes says so: result.planner and a
    `planner_fallback` audit event with the endpoint's error."""
    async with FakeOpenAI(None) as llm:
        n = node(tmp_path, llm.base_url)
        task = await plan(n, "summarize the readme")
    assert task.result is not None and task.result["planner"]["fallback"] == "recipes"
    events = (await n.store.audit_events(task_id=task.id)).items
    fallback = [e for e in events if getattr(e, "kind", None) == "planner_fallback"]
    assert len(fallback) == 1
    assert f"LLM endpoint {llm.base_url} failed" in str(getattr(fallback[0], "reason", ""))


async def test_a_plan_from_the_model_says_so_in_the_result(tmp_path: Path) -> None:
    """When the model planned, result.planner is "openai" and nothing is audited as a
    fallback."""
    async with FakeOpenAI([("read_file", {"path": "README.md"})]) as llm:
        n = node(tmp_path, llm.base_url)
        task = await plan(n, "read it")
    assert task.state is TaskState.COMPLETED
    assert task.result is not None and task.result["planner"] == {"kind": "openai"}
    events = (await n.store.audit_events(task_id=task.id)).items
    assert not [e for e in events if getattr(e, "kind", None) == "planner_fallback"]


async def test_arguments_sent_as_an_object_are_accepted(tmp_path: Path) -> None:
    """A server that sends `function.arguments` as a JSON object (not JSON text) still
    plans the task; it no longer crashes the worker."""
    script = steps(Answer(calls=[("read_file", {"path": "README.md"})], object_args=True))
    async with FakeOpenAI(script=script) as llm:
        task = await plan(node(tmp_path, llm.base_url), "do something else")
    assert task.state is TaskState.COMPLETED and task.result is not None
    assert task.result["outputs"][0]["tool"] == "read_file"
    assert "fallback" not in task.result.get("planner", {})


@pytest.mark.parametrize(("failure", "said"), [
    (VLLM_NO_TOOL_CHOICE, "tool choice requires --enable-auto-tool-choice"),
    (OLLAMA_NO_MODEL, 'model "llama3.1" not found, try pulling it first'),
    (ERROR_WITH_200, "upstream model overloaded")])
async def test_the_servers_own_error_text_reaches_the_reason(
        tmp_path: Path, failure: Failure, said: str) -> None:
    """What vLLM or Ollama said is in result.reason and the audit log, not
    `failed: 'choices'`."""
    async with FakeOpenAI(failure) as llm:
        n = node(tmp_path, llm.base_url)
        task = await plan(n, "do something else")
    assert task.state is TaskState.FAILED and task.result is not None
    assert said in task.result["reason"] and "'choices'" not in task.result["reason"]
    [event] = await fallbacks(n, task.id)
    assert said in (event.reason or "")


class BrokenPlanner:
    """A planner with a bug: it raises something that is not a planner error."""

    def plan(self, goal: str, **kwargs: Any) -> list[Action]:
        """Always raise."""
        raise RuntimeError("planner bug: index out of range")


async def test_an_exception_while_planning_is_a_retry_then_a_failure(tmp_path: Path) -> None:
    """A planning crash counts as a retry; past daemon.max_retries the task fails with the
    exception's text (instead of crash-looping in planning with retries 0)."""
    work = tmp_path / "work"
    work.mkdir()
    settings = Settings.model_validate({"daemon": {"work_dir": str(work), "max_retries": 1}})
    n = build_node(settings, store=MemTaskStore(), planner=BrokenPlanner())
    first = await plan(n, "anything")
    assert first.state is TaskState.QUEUED and first.retries == 1
    cfg = n.engine.config
    claimed = await n.store.claim_next(cfg.node_id, n.engine.clock.now() + cfg.lease)
    assert claimed is not None
    last = await n.engine.advance(claimed)
    assert last.state is TaskState.FAILED and last.result is not None
    assert "planner bug: index out of range" in last.result["reason"]
