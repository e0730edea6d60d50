"""Agent mode against a scripted OpenAI-compatible server: turn by turn, each call through
the policy, gated calls parked for a person, refusals told to the model, limits enforced."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from signoff.config.settings import Settings
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Scope, TaskState
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.wiring import build_node
from tests.agentkit import (
    NOTES,
    agent_config,
    agent_node,
    decide,
    last_card_ref,
    recorder,
    start,
    tool_results,
    transcript,
)
from tests.conftest import NodeFactory, deep_merge
from tests.fakes.openai import Answer, FakeOpenAI, Seen, steps
from tests.fakes.smtp import FakeSmtpServer

READ = ("read_file", {"path": "notes.txt"})
GOAL = "email bob@example.com the first line of notes.txt"


def email_what_was_read(seen: Seen) -> Answer:
    """A model that reads the notes, mails their first line, then says it is done."""
    if seen.turn == 1:
        return Answer(content="I will read the notes first.", calls=[READ])
    if seen.turn == 2:
        first = seen.result()["content"].splitlines()[0]
        return Answer(content="Sending Bob the first line.", calls=[("send_email", {
            "to": "bob@example.com", "subject": "notes", "body": first})])
    return Answer(content=f"Done: {seen.results()[-1]}")


def smtp_settings(server: FakeSmtpServer) -> dict[str, Any]:
    return {"email": {"host": server.host, "port": server.port, "from": "bot@signoff.test"}}


async def test_read_then_send_mails_what_was_read(node_factory: NodeFactory,
                                                  tmp_path: Path) -> None:
    """The model reads a file, the e-mail it proposes holds what it read, a person approves,
    the mail goes out and the model's last words are the task's answer."""
    with FakeSmtpServer() as smtp:
        async with FakeOpenAI(script=email_what_was_read) as llm:
            node = await agent_node(node_factory, llm.base_url, tmp_path / "work",
                                    extra=smtp_settings(smtp))
            task = await start(node, GOAL)
            assert task.state is TaskState.WAITING_APPROVAL
            assert task.pending_action is not None
            assert task.pending_action.args["body"] == "Meeting moved to 3pm"
            assert [a.tool for a in task.actions] == ["read_file"]
            done = await decide(node, Scope.ONCE)
        assert [m.body.strip() for m in smtp.messages] == ["Meeting moved to 3pm"]
    assert done.state is TaskState.COMPLETED
    assert done.result is not None and done.result["answer"].startswith("Done: ")
    assert done.result["summary"] == "2 action(s) completed"
    assert [a.tool for a in done.actions] == ["read_file", "send_email"]
    assert len(llm.requests) == 3
    first = llm.requests[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[1]["content"] == GOAL
    assert tool_results(llm.requests[1])[0]["content"] == NOTES
    stored = await transcript(node, task.id)
    assert [e.role for e in stored] == ["system", "user", "assistant", "tool", "assistant",
                                        "tool", "assistant"]


async def test_a_call_held_in_its_undo_window_waits_and_is_asked_nowhere_else(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """Approved under ``approvals.hold``, the e-mail waits out its undo window: the task,
    advanced meanwhile, neither sends it nor asks about it again (the agent's resume took
    only PENDING for "still waiting", so a held call was judged afresh and got a second
    card); nothing was mailed and the model was asked nothing more. Released when the
    window ends, the e-mail goes out once and the model hears of it."""
    clock = FakeClock()
    with FakeSmtpServer() as smtp:
        async with FakeOpenAI(script=email_what_was_read) as llm:
            config = deep_merge(agent_config(llm.base_url, tmp_path / "work"),
                                {**smtp_settings(smtp), "approvals": {"hold": {"SEND": "10m"}}})
            node = await node_factory(config, clock=clock)
            task = await start(node, GOAL)
            assert task.state is TaskState.WAITING_APPROVAL
            ref = await last_card_ref(node)
            outcome = await recorder(node).click(ref, Scope.ONCE, "alice")
            assert outcome.accepted, outcome.message
            held = await node.store.get_task(task.id)
            assert held is not None and held.approval is not None
            assert held.approval.status.value == "held"
            again = await node.engine.advance(held)
            await node.flow.dispatcher.run_once()
            assert again.state is TaskState.WAITING_APPROVAL
            asked = {m.card.approval_id for m in recorder(node).messages.values()}
            assert asked == {held.approval.id}
            assert smtp.messages == [] and len(llm.requests) == 2
            clock.advance(601)
            await node.decider.release_due()
            done = await node.engine.advance(await node.worker._ready.get())
        assert [m.body.strip() for m in smtp.messages] == ["Meeting moved to 3pm"]
    assert done.state is TaskState.COMPLETED and len(llm.requests) == 3


async def test_deny_is_told_to_the_model_which_goes_on(node_factory: NodeFactory,
                                                       tmp_path: Path) -> None:
    """A denied call comes back as a tool error; the model answers and the task completes,
    with the refusal in its history and the audit log."""
    script = steps(Answer(calls=[("delete_file", {"path": "notes.txt"})]),
                   Answer(content="I could not delete the notes."))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        task = await start(node, "delete the notes")
        assert task.state is TaskState.WAITING_APPROVAL
        done = await decide(node, Scope.DENY, reason="keep them")
    assert done.state is TaskState.COMPLETED
    assert done.result is not None and done.result["answer"] == "I could not delete the notes."
    assert tool_results(llm.requests[1]) == [{"error": "not approved: user denied: keep them"}]
    assert [(a.tool, a.outcome) for a in done.actions] == [("delete_file", "denied")]
    assert (tmp_path / "work" / "notes.txt").exists()
    audit = (await node.store.audit_events(task_id=task.id)).items
    assert any(getattr(e, "decision", None) == "deny" for e in audit)


async def test_the_same_denied_call_asked_again_is_blocked_at_once(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """After a deny, the very same call (same fingerprint) is BLOCKed without a new card."""
    delete = ("delete_file", {"path": "notes.txt"})
    script = steps(Answer(calls=[delete]), Answer(calls=[delete]), Answer(content="gave up"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        await start(node, "delete the notes")
        done = await decide(node, Scope.DENY)
    assert done.state is TaskState.COMPLETED
    assert tool_results(llm.requests[2])[-1] == {
        "error": "not approved: blocked: denied earlier in this task"}
    assert [a.outcome for a in done.actions] == ["denied", "blocked"]
    assert len(recorder(node).messages) == 1  # no second card
    audit = (await node.store.audit_events(task_id=done.id)).items
    assert any(getattr(e, "reason", None) == "denied earlier in this task" for e in audit)


async def test_parallel_calls_run_in_order_and_the_gated_one_pauses_the_rest(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """Three calls in one turn: the first runs, the gated second waits for a person, the
    third runs after it; the model then gets all three results, in order."""
    calls = [READ, ("delete_file", {"path": "notes.txt"}), ("list_dir", {"path": "."})]
    script = steps(Answer(calls=calls), Answer(content="all done"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        task = await start(node, "read, then delete, then list")
        assert task.state is TaskState.WAITING_APPROVAL
        assert [a.tool for a in task.actions] == ["read_file"]
        done = await decide(node, Scope.ONCE)
    assert done.state is TaskState.COMPLETED
    assert [a.tool for a in done.actions] == ["read_file", "delete_file", "list_dir"]
    second = llm.requests[1]["messages"]
    ids = [c["id"] for c in second[2]["tool_calls"]]
    assert [m["tool_call_id"] for m in second if m["role"] == "tool"] == ids
    listing = tool_results(llm.requests[1])[2]
    assert "notes.txt" not in str(listing)
    assert len(llm.requests) == 2


async def test_invalid_json_arguments_are_answered_as_a_tool_error(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """Arguments that are not JSON do not crash the task: the model is told and retries."""
    script = steps(Answer(calls=[("read_file", '{"path": "notes.txt"')]), Answer(calls=[READ]),
                   Answer(content="read it"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        done = await start(node, "read the notes")
    assert done.state is TaskState.COMPLETED
    error = tool_results(llm.requests[1])[0]["error"]
    assert error.startswith("the arguments of read_file are not valid JSON")
    assert [a.tool for a in done.actions] == ["read_file"]


async def test_an_unknown_tool_is_answered_with_the_known_ones(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """A tool the registry does not offer is a tool error naming the tools that exist."""
    script = steps(Answer(calls=[("launch_rockets", {})]), Answer(content="no rockets"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        done = await start(node, "launch")
    assert done.state is TaskState.COMPLETED
    error = tool_results(llm.requests[1])[0]["error"]
    assert error.startswith("unknown tool 'launch_rockets' (known tools: ")
    assert "send_email" in error and done.actions == []


async def test_calls_without_ids_or_with_repeated_ids_each_get_their_result(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """A server that repeats a call id or leaves it out: every call still runs once and
    gets its own result, matched by an id of its own."""
    script = steps(Answer(calls=[READ, ("list_dir", {"path": "."}), READ],
                          ids=["call_0", "call_0", None]), Answer(content="done"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        done = await start(node, "read twice")
    assert done.state is TaskState.COMPLETED
    assert [a.tool for a in done.actions] == ["read_file", "list_dir", "read_file"]
    second = llm.requests[1]["messages"]
    ids = [c["id"] for c in second[2]["tool_calls"]]
    assert len(set(ids)) == 3
    assert [m["tool_call_id"] for m in second if m["role"] == "tool"] == ids


async def test_a_call_that_can_never_succeed_is_told_without_asking_anyone(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """A delete outside the work dir fails before anyone is asked (no card): the model
    gets the tool error, audited as "cannot run", and goes on."""
    script = steps(Answer(calls=[("delete_file", {"path": "../outside.txt"})]),
                   Answer(content="that path is not mine to touch"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work")
        done = await start(node, "delete the outside file")
    assert done.state is TaskState.COMPLETED
    assert recorder(node).messages == {}
    error = tool_results(llm.requests[1])[0]["error"]
    assert error.startswith("delete_file failed: ")
    assert [(a.decided_by, a.outcome) for a in done.actions] == [("auto:check", "error")]
    audit = (await node.store.audit_events(task_id=done.id)).items
    assert any((e.reason or "").startswith("cannot run: ") for e in audit)


async def test_max_turns_fails_the_task_naming_the_limit(node_factory: NodeFactory,
                                                          tmp_path: Path) -> None:
    """A model that never stops is asked at most max_turns times, then the task fails."""
    async with FakeOpenAI(script=lambda seen: Answer(calls=[READ])) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work", max_turns=3)
        done = await start(node, "read forever")
    assert done.state is TaskState.FAILED
    assert done.result is not None and done.result["reason"] == "agent exceeded max_turns (3)"
    assert len(llm.requests) == 3


async def test_max_actions_fails_the_task_naming_the_limit(node_factory: NodeFactory,
                                                            tmp_path: Path) -> None:
    """More tool calls than max_actions: the extra call is not made and the task fails."""
    async with FakeOpenAI(script=lambda seen: Answer(calls=[READ, READ])) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work", max_actions=3)
        done = await start(node, "read a lot")
    assert done.state is TaskState.FAILED
    assert done.result is not None and done.result["reason"] == "agent exceeded max_actions (3)"
    assert len(done.actions) == 3


async def test_a_failing_endpoint_fails_the_task_without_falling_back(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """HTTP 500 in agent mode: the task fails clearly, even with a matching recipe."""
    recipe = {"recipes": [{"name": "notes", "match": "notes",
                           "steps": [{"tool": "read_file", "args": {"path": "notes.txt"}}]}]}
    async with FakeOpenAI(None) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work", extra=recipe)
        done = await start(node, "read the notes")
    assert done.state is TaskState.FAILED
    reason = done.result["reason"] if done.result else ""
    assert reason.startswith(f"planning failed: LLM endpoint {llm.base_url} failed: ")
    assert done.actions == []
    assert [e.role for e in await transcript(node, done.id)] == ["system", "user"]


async def test_an_unreachable_endpoint_fails_the_task_too(node_factory: NodeFactory,
                                                          tmp_path: Path) -> None:
    """Nothing listening: "planning failed: LLM endpoint …", no silent fallback."""
    node = await agent_node(node_factory, "http://127.0.0.1:9/v1", tmp_path / "work")
    done = await start(node, "read the notes")
    assert done.state is TaskState.FAILED
    assert done.result is not None
    assert done.result["reason"].startswith("planning failed: LLM endpoint http://127.0.0.1:9/v1")


async def test_on_deny_fail_keeps_the_fixed_plan_behaviour(node_factory: NodeFactory,
                                                           tmp_path: Path) -> None:
    """With on_deny = "fail" a deny fails the task with "user denied"; the model is not
    asked again."""
    script = steps(Answer(calls=[("delete_file", {"path": "notes.txt"})]), Answer(content="x"))
    async with FakeOpenAI(script=script) as llm:
        node = await agent_node(node_factory, llm.base_url, tmp_path / "work", on_deny="fail")
        task = await start(node, "delete the notes")
        ref = await last_card_ref(node)
        await recorder(node).click(ref, Scope.DENY, "alice")
    stored = await node.store.get_task(task.id)
    assert stored is not None and stored.state is TaskState.FAILED
    assert stored.result is not None and stored.result["reason"] == "user denied"
    assert len(llm.requests) == 1


async def test_a_timed_out_request_is_told_to_the_model(node_factory: NodeFactory,
                                                        tmp_path: Path) -> None:
    """An approval that expires becomes "not approved: approval timed out" for the model."""
    clock = FakeClock()
    script = steps(Answer(calls=[("delete_file", {"path": "notes.txt"})]),
                   Answer(content="nobody answered"))
    async with FakeOpenAI(script=script) as llm:
        node = await node_factory(agent_config(llm.base_url, tmp_path / "work"), clock=clock)
        await start(node, "delete the notes")
        clock.advance(timedelta(minutes=31))
        await node.decider.expire_due()
        done = await node.engine.advance(await node.worker._ready.get())
    assert done.state is TaskState.COMPLETED
    assert tool_results(llm.requests[1]) == [{"error": "not approved: approval timed out"}]
    assert [a.outcome for a in done.actions] == ["timed_out"]


async def test_a_restarted_node_goes_on_without_asking_the_model_again(tmp_path: Path,
                                                                       store_url: str) -> None:
    """A second node on the same database (SQLite, PostgreSQL) resumes an approved agent
    task from its stored transcript: the model gets only the request for the next turn."""
    url = store_url
    with FakeSmtpServer() as smtp:
        async with FakeOpenAI(script=email_what_was_read) as llm:
            settings = Settings.model_validate({**agent_config(llm.base_url, tmp_path / "work"),
                                                **smtp_settings(smtp)})
            first = build_node(settings, store=SqlTaskStore(url=url))
            await first.store.open()
            task = await start(first, GOAL)
            await first.store.close()
            assert task.state is TaskState.WAITING_APPROVAL and len(llm.requests) == 2
            assert task.approval is not None

            second = build_node(settings, store=SqlTaskStore(url=url))
            await second.store.open()
            await second.decider.decide(task.approval.id, Scope.ONCE, "web:admin")
            done = await second.engine.advance(await second.worker._ready.get())
            await second.store.close()
        assert len(smtp.messages) == 1
    assert done.state is TaskState.COMPLETED
    assert len(llm.requests) == 3
    assert [a.tool for a in done.actions] == ["read_file", "send_email"]
