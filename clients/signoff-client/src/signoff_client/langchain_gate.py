"""LangChain agents (``create_agent``, run by LangGraph): signoff decides each gated tool
call inside the graph, right before it runs.

    agent = create_agent(model, tools=[send_note], checkpointer=saver,
                         middleware=[SignoffMiddleware(client, gated={"send_note"})])

`SignoffMiddleware` wraps tool execution: for a gated tool it asks signoff about the call
(the tool's name and the args it is about to run with), waits for the answer, and runs
the tool only on an approval: with a copy of the args signoff was shown, taken before it
asked, or with the args a person edited. Anything else (a denial, an expiry, a block, the
daemon unreachable) is a ``ToolMessage`` with signoff's reason and status "error": the
tool does not run and the model reads why.

Nothing the graph's caller sends can approve a call: there is no interrupt to resume, so a
forged ``Command(resume=...)`` has nothing to answer, and a checkpoint resumed twice asks
again (each execution is its own request; a Session or Always grant answers it at once).
This is the gate to use whenever anyone but your own process can resume a thread; the
``HumanInTheLoopMiddleware`` + `signoff_client.langgraph.resolve` pairing trusts whoever
resumes. Put this middleware last in the list: middleware after it runs inside it and
could change a call after signoff saw it.

Needs ``langchain`` (``pip install 'signoff-client[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from signoff_client.frameworks import ToolCall, refusal
from signoff_client.sdk import Decision, Signoff, SignoffSync

Result = ToolMessage | Command[Any]


class SignoffMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Ask signoff before each gated tool call runs; run it only when approved.

    ``gated``: the names of the gated tools (default: every tool; the attribute
    ``tools`` is LangChain's, for tools a middleware adds). ``policy_id``: where
    Session and Always grants live (default: the client's). ``risk``: the risk class of
    tools signoff does not know (default: the daemon's, DESTRUCTIVE). A `SignoffSync`
    client serves ``invoke`` and (in a worker thread) ``ainvoke``; a `Signoff` client
    serves ``ainvoke`` only, and a synchronous run is refused rather than run ungated.
    """

    def __init__(self, client: Signoff | SignoffSync, *, gated: Collection[str] | None = None,
                 policy_id: str | None = None, goal: str | None = None,
                 risk: str | None = None) -> None:
        super().__init__()
        self.client = client
        self.gated = frozenset(gated) if gated is not None else None
        self.policy_id = policy_id
        self.goal = goal
        self.risk = risk

    def _gated(self, request: ToolCallRequest) -> ToolCall | None:
        """The call to ask about, or None for a tool that is not gated. Its args are a
        deep copy nobody else holds: what runs is what was shown, even if the state's own
        dict changes while a person decides."""
        name = str(request.tool_call.get("name"))
        if self.gated is not None and name not in self.gated:
            return None
        return ToolCall(tool=name, args=copy.deepcopy(dict(request.tool_call.get("args") or {})))

    def _ask(self, call: ToolCall) -> dict[str, Any]:
        shown = ToolCall.of(call.tool, call.args)
        return {"tool": shown.tool, "args": shown.args, "policy_id": self.policy_id,
                "goal": self.goal, "risk": self.risk, "idempotency_key": call.key,
                "editable": True}

    @staticmethod
    def _approved(request: ToolCallRequest, call: ToolCall,
                  decision: Decision) -> ToolCallRequest | ToolMessage:
        """The request to run (the asked args, or a person's edit), or the refusal."""
        if not decision.approved:
            return _refused(request, call.tool, refusal(call.tool, decision))
        args = decision.args if decision.edited else call.args
        return request.override(tool_call={**request.tool_call, "args": dict(args or {})})

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Result]) -> Result:
        call = self._gated(request)
        if call is None:
            return handler(request)
        if not isinstance(self.client, SignoffSync):
            return _refused(request, call.tool, (
                f"signoff could not ask about {call.tool}: this agent runs synchronously "
                "and SignoffMiddleware has an async client (use SignoffSync). "
                "The action was not run."))
        decision = self.client.request(**self._ask(call))
        approved = self._approved(request, call, decision)
        if isinstance(approved, ToolMessage):
            return approved
        try:
            result = handler(approved)
        except BaseException as exc:
            if decision.id:
                self.client.report(decision.id, False, repr(exc)[:500])
            raise
        if decision.id:
            self.client.report(decision.id, _ok(result))
        return result

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Result]]
                              ) -> Result:
        call = self._gated(request)
        if call is None:
            return await handler(request)
        decision = await self._arequest(call)
        approved = self._approved(request, call, decision)
        if isinstance(approved, ToolMessage):
            return approved
        try:
            result = await handler(approved)
        except BaseException as exc:
            await self._areport(decision, False, repr(exc)[:500])
            raise
        await self._areport(decision, _ok(result))
        return result

    async def _arequest(self, call: ToolCall) -> Decision:
        if isinstance(self.client, Signoff):
            return await self.client.request(**self._ask(call))
        return await asyncio.to_thread(self.client.request, **self._ask(call))

    async def _areport(self, decision: Decision, ok: bool, detail: str | None = None) -> None:
        if not decision.id:
            return
        if isinstance(self.client, Signoff):
            await self.client.report(decision.id, ok, detail)
        else:
            await asyncio.to_thread(self.client.report, decision.id, ok, detail)


def _refused(request: ToolCallRequest, tool: str, words: str) -> ToolMessage:
    return ToolMessage(content=words, tool_call_id=str(request.tool_call.get("id") or ""),
                       name=tool, status="error")


def _ok(result: Result) -> bool:
    """Whether the tool's run went well, for the outcome reported to signoff."""
    return not (isinstance(result, ToolMessage) and result.status == "error")
