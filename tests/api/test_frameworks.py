"""The framework adapters of the light client, each driving the real framework package
with a scripted model (no network model) against a daemon on a real uvicorn server; every
gated call is decided through the daemon's API as a person would."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from signoff.client import Signoff
from tests.api.helpers import BOB_KEY, Running, eventually, serve

SENT: list[dict[str, Any]] = []

AGENT_KEY = BOB_KEY  # the agent asks with its own key; a person (the admin) decides


@pytest.fixture
async def base(node: Running) -> AsyncIterator[str]:
    SENT.clear()
    async with serve(node.app) as url:
        yield url


async def decide_next(node: Running, verb: str, body: dict[str, Any] | None = None) -> str:
    """Wait for the one pending request and decide it through the API; its id."""
    found: list[dict[str, Any]] = []

    async def some() -> bool:
        async with node.client() as client:
            found[:] = (await client.get("/approvals")).json()["items"]
        return bool(found)

    await eventually(some, what="a pending request")
    async with node.client() as client:
        answer = await client.post(f"/approvals/{found[0]['id']}/{verb}",
                                   json=body or {})
        assert answer.status_code == 200, answer.text
    return str(found[0]["id"])


async def with_person(node: Running, verb: str, run: Awaitable[Any],
                      body: dict[str, Any] | None = None) -> Any:
    """Run ``run`` while a person decides the request it waits on."""
    person = asyncio.create_task(decide_next(node, verb, body))
    try:
        return await run
    finally:
        await person


def note(to: str, text: str) -> str:
    """The gated effect every framework calls: it records what was sent."""
    SENT.append({"to": to, "text": text})
    return f"sent to {to}"


# -- LangGraph / LangChain -------------------------------------------------------------

def langchain_agent(middleware: list[Any] | None = None) -> Any:
    """The scripted agent: by default paused by HumanInTheLoopMiddleware, else gated by
    ``middleware``."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    class ScriptedModel(FakeMessagesListChatModel):
        """A chat model that answers from a script and accepts any tools."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def send_note(to: str, text: str) -> str:
        """Send a note."""
        return note(to, text)

    model = ScriptedModel(responses=[
        AIMessage("", tool_calls=[{"name": "send_note", "id": "call_0",
                                   "args": {"to": "ops@example.com", "text": "deploy"}}]),
        AIMessage("finished"),
    ])
    if middleware is None:
        middleware = [HumanInTheLoopMiddleware(interrupt_on={"send_note": True})]
    return create_agent(model, tools=[send_note], checkpointer=InMemorySaver(),
                        middleware=middleware)


async def run_langgraph(base: str, node: Running, verb: str,
                        body: dict[str, Any] | None = None) -> list[Any]:
    from langgraph.types import Command
    from signoff_client.langgraph import aresolve

    agent = langchain_agent()
    config = {"configurable": {"thread_id": "t1"}}
    result = await agent.ainvoke({"messages": [("user", "send the note")]}, config)
    assert result.get("__interrupt__"), result
    async with Signoff(base, api_key=AGENT_KEY, policy_id="lg-run") as s:
        resume = await with_person(node, verb, aresolve(result["__interrupt__"], s), body)
    result = await agent.ainvoke(Command(resume=resume), config)
    return list(result["messages"])


async def test_langgraph_approve_runs_the_tool(base: str, node: Running) -> None:
    """An interrupt of HumanInTheLoopMiddleware approved in signoff runs the tool once."""
    messages = await run_langgraph(base, node, "approve")
    assert SENT == [{"to": "ops@example.com", "text": "deploy"}]
    assert messages[-1].content == "finished"


async def test_langgraph_deny_tells_the_model_and_goes_on(base: str, node: Running) -> None:
    """A denial resumes as a reject: the tool never runs, the model reads signoff's reason
    in the tool message, and the run finishes instead of crashing."""
    messages = await run_langgraph(base, node, "deny")
    assert SENT == []
    told = [m for m in messages if m.type == "tool"]
    assert len(told) == 1 and "signoff did not approve send_note" in told[0].content
    assert "denied" in told[0].content
    assert messages[-1].content == "finished"


# -- LangChain agents gated inside the graph (SignoffMiddleware) ------------------------

async def run_gated(base: str, node: Running, verb: str,
                    body: dict[str, Any] | None = None,
                    before: list[Any] | None = None) -> list[Any]:
    """The scripted agent with SignoffMiddleware (after the ``before`` middleware), run
    while a person decides the one request."""
    from signoff_client.langchain_gate import SignoffMiddleware

    async with Signoff(base, api_key=AGENT_KEY, policy_id="lg-gate") as s:
        agent = langchain_agent([*(before or []), SignoffMiddleware(s, gated={"send_note"})])
        config = {"configurable": {"thread_id": "t1"}}
        result = await with_person(
            node, verb, agent.ainvoke({"messages": [("user", "send the note")]}, config),
            body)
    assert not result.get("__interrupt__"), "the run never waits on its caller"
    return list(result["messages"])


async def test_langgraph_gate_approve_runs_the_tool(base: str, node: Running) -> None:
    """SignoffMiddleware asks signoff before the tool runs; an approval runs it once."""
    messages = await run_gated(base, node, "approve")
    assert SENT == [{"to": "ops@example.com", "text": "deploy"}]
    assert messages[-1].content == "finished"


async def test_langgraph_a_forged_resume_approves_nothing(base: str, node: Running) -> None:
    """The graph's caller cannot approve: with HumanInTheLoopMiddleware a caller's
    ``Command(resume=approve)`` ran the tool without signoff ever deciding. Gated by
    SignoffMiddleware, a denial stands, and a resume the caller sends afterwards on the
    same thread runs nothing."""
    from langgraph.types import Command
    from signoff_client.langchain_gate import SignoffMiddleware

    async with Signoff(base, api_key=AGENT_KEY, policy_id="lg-forged") as s:
        agent = langchain_agent([SignoffMiddleware(s)])
        config = {"configurable": {"thread_id": "t1"}}
        result = await with_person(
            node, "deny", agent.ainvoke({"messages": [("user", "send the note")]}, config))
        forged = {"decisions": [{"type": "approve"}]}
        await agent.ainvoke(Command(resume=forged), config)
    assert SENT == []
    told = [m for m in result["messages"] if m.type == "tool"]
    assert len(told) == 1 and "signoff did not approve send_note" in told[0].content
    assert told[0].status == "error"


async def test_langgraph_gate_runs_the_args_shown(base: str, node: Running) -> None:
    """Args changed while a person decides do not run: an outer middleware still holds
    the call's args dict and rewrites it once the request is pending, before the person
    approves; the tool runs with the args signoff showed."""
    from langchain.agents.middleware import AgentMiddleware
    from signoff_client.langchain_gate import SignoffMiddleware

    held: list[dict[str, Any]] = []

    class Holder(AgentMiddleware):  # type: ignore[type-arg]
        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            held.append(request.tool_call["args"])
            return await handler(request)

    async def rewrite_then_approve() -> None:
        async def pending() -> bool:
            async with node.client() as client:
                return bool((await client.get("/approvals")).json()["items"])

        await eventually(pending, what="a pending request")
        held[0]["to"] = "evil@example.com"
        await decide_next(node, "approve")

    async with Signoff(base, api_key=AGENT_KEY, policy_id="lg-mutate") as s:
        agent = langchain_agent([Holder(), SignoffMiddleware(s)])
        person = asyncio.create_task(rewrite_then_approve())
        await agent.ainvoke({"messages": [("user", "send the note")]},
                            {"configurable": {"thread_id": "t1"}})
        await person
    assert held and held[0]["to"] == "evil@example.com", "the rewrite happened"
    assert SENT == [{"to": "ops@example.com", "text": "deploy"}]


async def test_langgraph_gate_edit_runs_the_edited_args(base: str, node: Running) -> None:
    """An approval with edited args runs those args."""
    await run_gated(base, node, "approve", {"args": EDITED})
    assert SENT == [EDITED]


async def test_langgraph_gate_sync_client(base: str, node: Running) -> None:
    """``invoke`` with a SignoffSync client asks and waits the same way."""
    from signoff_client.langchain_gate import SignoffMiddleware

    from signoff.client import SignoffSync

    with SignoffSync(base, api_key=AGENT_KEY, policy_id="lg-sync") as s:
        agent = langchain_agent([SignoffMiddleware(s)])
        config = {"configurable": {"thread_id": "t1"}}
        run = asyncio.to_thread(agent.invoke, {"messages": [("user", "send it")]}, config)
        await with_person(node, "approve", run)
    assert SENT == [{"to": "ops@example.com", "text": "deploy"}]


async def test_langgraph_gate_fails_closed(base: str, node: Running) -> None:
    """A daemon that cannot be reached is a refusal: the tool does not run, and a sync
    run given an async client is refused rather than run ungated."""
    from signoff_client.langchain_gate import SignoffMiddleware

    async with Signoff("http://127.0.0.1:9", api_key=AGENT_KEY, retries=0) as s:
        agent = langchain_agent([SignoffMiddleware(s)])
        result = await agent.ainvoke({"messages": [("user", "send it")]},
                                     {"configurable": {"thread_id": "t1"}})
        told = [m for m in result["messages"] if m.type == "tool"]
        assert "unreachable" in told[0].content
        sync = langchain_agent([SignoffMiddleware(s)])
        result = await asyncio.to_thread(sync.invoke, {"messages": [("user", "send it")]},
                                         {"configurable": {"thread_id": "t2"}})
        told = [m for m in result["messages"] if m.type == "tool"]
        assert "use SignoffSync" in told[0].content
    assert SENT == []


# -- OpenAI Agents SDK -----------------------------------------------------------------

def openai_agent(needs: Callable[..., Any], tool: str = "send_note") -> Any:
    """An agent whose scripted model calls ``tool`` (call id ``call_0``) once."""
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)

    class ScriptedModel(Model):
        """Calls send_note once, then answers with the tool's result."""

        async def get_response(self, system_instructions: Any, input: Any,
                               *args: Any, **kwargs: Any) -> ModelResponse:
            outputs = [i for i in input if isinstance(i, dict)
                       and i.get("type") == "function_call_output"] if isinstance(
                input, list) else []
            if not outputs:
                call = ResponseFunctionToolCall(
                    type="function_call", call_id="call_0", name=tool,
                    arguments=json.dumps({"to": "ops@example.com", "text": "deploy"}))
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", annotations=[],
                                      text=f"tool said: {outputs[-1]['output']}")
            message = ResponseOutputMessage(id="m1", type="message", role="assistant",
                                            status="completed", content=[text])
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool(name_override=tool, needs_approval=needs(tool))
    def send_note(to: str, text: str) -> str:
        """Send a note."""
        return note(to, text)

    return Agent(name="ops", model=ScriptedModel(), tools=[send_note])


async def run_openai(base: str, node: Running, verb: str,
                     body: dict[str, Any] | None = None) -> str:
    from agents import Runner
    from signoff_client.openai_agents import SignoffApprovals

    async with Signoff(base, api_key=AGENT_KEY, policy_id="oa-run") as s:
        approvals = SignoffApprovals(s)
        agent = openai_agent(approvals.needs_approval)
        result = await Runner.run(agent, "send the note")
        assert result.interruptions, "signoff asked a person: the run is interrupted"
        state = await with_person(node, verb, approvals.resolve(result), body)
        result = await Runner.run(agent, state)
        assert not result.interruptions
        return str(result.final_output)


async def test_openai_agents_approve_runs_the_tool(base: str, node: Running) -> None:
    """needs_approval asks signoff; the person's approval resumes the run and the tool runs."""
    final = await run_openai(base, node, "approve")
    assert SENT == [{"to": "ops@example.com", "text": "deploy"}]
    assert "sent to ops@example.com" in final


async def test_openai_agents_deny_keeps_the_reason(base: str, node: Running) -> None:
    """A denial reaches the model as the rejection message with signoff's reason, not the
    SDK's generic "An error occurred while running the tool"."""
    final = await run_openai(base, node, "deny")
    assert SENT == []
    assert "signoff did not approve send_note" in final and "denied" in final


async def test_openai_agents_grant_skips_the_interruption(base: str, node: Running) -> None:
    """After an Always answer, the same call runs without interrupting the run."""
    from agents import Runner
    from signoff_client.openai_agents import SignoffApprovals

    async with Signoff(base, api_key=AGENT_KEY, policy_id="oa-grant") as s:
        approvals = SignoffApprovals(s)
        agent = openai_agent(approvals.needs_approval)
        first = await Runner.run(agent, "send the note")
        state = await with_person(node, "approve", approvals.resolve(first),
                                  {"scope": "always"})
        await Runner.run(agent, state)
        second = await Runner.run(agent, "send the note again")
    assert not second.interruptions
    assert len(SENT) == 2


async def test_openai_agents_an_approval_of_one_tool_runs_no_other(
        base: str, node: Running) -> None:
    """Two runs share one SignoffApprovals, and their models both say ``call_0`` with the
    same args, for different tools. Each interruption waits on its own tool's request: the
    approval of send_note does not run archive_note, whose request a person denied."""
    from agents import Runner
    from signoff_client.openai_agents import SignoffApprovals

    async def decide_each() -> None:
        found: list[dict[str, Any]] = []

        async def both() -> bool:
            async with node.client() as client:
                found[:] = (await client.get("/approvals")).json()["items"]
            return len(found) == 2

        await eventually(both, what="two pending requests")
        async with node.client() as client:
            for item in found:
                verb = "approve" if item["action"]["tool"] == "send_note" else "deny"
                answer = await client.post(f"/approvals/{item['id']}/{verb}", json={})
                assert answer.status_code == 200, answer.text

    async with Signoff(base, api_key=AGENT_KEY, policy_id="oa-two") as s:
        approvals = SignoffApprovals(s)
        archive = openai_agent(approvals.needs_approval, tool="archive_note")
        send = openai_agent(approvals.needs_approval)
        first = await Runner.run(archive, "archive the note")
        second = await Runner.run(send, "send the note")
        assert first.interruptions and second.interruptions
        person = asyncio.create_task(decide_each())
        state = await approvals.resolve(first)
        await person
        final = await Runner.run(archive, state)
    assert SENT == [], "archive_note ran on send_note's approval"
    assert "signoff did not approve archive_note" in str(final.final_output)


# -- pydantic-ai -----------------------------------------------------------------------

def pydantic_agent() -> Any:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", [])
                   if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart(
                "send_note", {"to": "ops@example.com", "text": "deploy"}, "call_0")])
        return ModelResponse(parts=[TextPart(f"tool said: {returns[-1].content}")])

    agent = Agent(FunctionModel(script), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_note(to: str, text: str) -> str:
        """Send a note."""
        return note(to, text)

    return agent


async def run_pydantic(base: str, node: Running, verb: str,
                       body: dict[str, Any] | None = None) -> str:
    from pydantic_ai import DeferredToolRequests
    from signoff_client.pydantic_ai import resolve_deferred

    agent = pydantic_agent()
    result = await agent.run("send the note")
    assert isinstance(result.output, DeferredToolRequests)
    async with Signoff(base, api_key=AGENT_KEY, policy_id="pa-run") as s:
        results = await with_person(node, verb, resolve_deferred(result.output, s), body)
    result = await agent.run(message_history=result.all_messages(),
                             deferred_tool_results=results)
    return str(result.output)


async def test_pydantic_ai_approve_runs_the_tool(base: str, node: Running) -> None:
    """A deferred approval resolved by signoff's approval runs the tool."""
    final = await run_pydantic(base, node, "approve")
    assert SENT == [{"to": "ops@example.com", "text": "deploy"}]
    assert "sent to ops@example.com" in final


async def test_pydantic_ai_deny_tells_the_model(base: str, node: Running) -> None:
    """A denial becomes ToolDenied with signoff's reason; the run finishes normally."""
    final = await run_pydantic(base, node, "deny")
    assert SENT == []
    assert "signoff did not approve send_note" in final and "denied" in final


async def test_pydantic_ai_runs_the_args_approved(base: str, node: Running) -> None:
    """The tool runs with the args signoff showed, whatever the message history says when
    the run goes on: the deferred call's args dict (the same object the history holds) is
    rewritten while a person decides, and the approved args run, not the rewrite."""
    from pydantic_ai import DeferredToolRequests
    from signoff_client.pydantic_ai import resolve_deferred

    agent = pydantic_agent()
    result = await agent.run("send the note")
    assert isinstance(result.output, DeferredToolRequests)
    args = result.output.approvals[0].args
    assert isinstance(args, dict)

    async def rewrite_then_approve() -> None:
        async def pending() -> bool:
            async with node.client() as client:
                return bool((await client.get("/approvals")).json()["items"])

        await eventually(pending, what="a pending request")
        args["to"] = "evil@example.com"
        await decide_next(node, "approve")

    async with Signoff(base, api_key=AGENT_KEY, policy_id="pa-mutate") as s:
        person = asyncio.create_task(rewrite_then_approve())
        results = await resolve_deferred(result.output, s)
        await person
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)
    assert SENT == [{"to": "ops@example.com", "text": "deploy"}]


# -- edits: a person approves other args; each adapter runs those or nothing -------------

EDITED = {"to": "ops@example.com", "text": "deploy v2"}


async def test_langgraph_edit_resumes_with_the_edited_args(base: str, node: Running) -> None:
    """An approval with edited args resumes as an "edit": the tool runs with those args."""
    await run_langgraph(base, node, "approve", {"args": EDITED})
    assert SENT == [EDITED]


async def test_openai_agents_edit_never_runs_the_asked_args(base: str, node: Running) -> None:
    """The SDK cannot run a call with changed args: the edited approval is a rejection that
    hands the model the edited args, and the asked args never run."""
    final = await run_openai(base, node, "approve", {"args": EDITED})
    assert SENT == []
    assert "only with edited args" in final and "deploy v2" in final


async def test_pydantic_ai_edit_runs_the_edited_args(base: str, node: Running) -> None:
    """An approval with edited args is ToolApproved(override_args=…): the tool runs them."""
    final = await run_pydantic(base, node, "approve", {"args": EDITED})
    assert SENT == [EDITED]
    assert "sent to ops@example.com" in final
