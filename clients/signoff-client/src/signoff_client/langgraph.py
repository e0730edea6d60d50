"""LangGraph and LangChain: answer human-in-the-loop interrupts through signoff.

LangChain's ``HumanInTheLoopMiddleware`` (and any graph that raises the same interrupt
shapes) pauses a run with an interrupt per model turn (``HITLRequest``: a list of
``action_requests``) or per tool call (``ToolApprovalRequest``). `aresolve` /
`resolve` ask signoff about every action in those interrupts and build the value to
resume with::

    result = agent.invoke({"messages": [...]}, config)
    while result.get("__interrupt__"):
        result = agent.invoke(Command(resume=resolve(result["__interrupt__"], client)),
                              config)

An approval resumes with ``{"type": "approve"}``; an approval with args a person edited
in signoff with ``{"type": "edit", "edited_action": {"name": <the same tool>, "args":
<the edited args>}}`` (the requests are asked ``editable``; when the interrupt's review
config does not allow "edit", it is a reject that says so: the asked args never run after
an edit); anything else with ``{"type": "reject", "message": <signoff's reason>}``, so the
model reads why and the run goes on.

The graph runs whatever it is resumed with: whoever can resume a thread can approve (a
forged ``{"type": "approve"}`` runs the tool without signoff deciding). Use this only
when nothing but your own process resumes threads; otherwise gate inside the graph with
`signoff_client.langchain_gate.SignoffMiddleware`, which no resume value can answer.
This module imports nothing from LangChain or LangGraph: interrupts are read by shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from signoff_client.frameworks import ToolCall, refusal
from signoff_client.sdk import Decision, Signoff, SignoffSync

Answer = dict[str, Any]


Pending = tuple[str, list[tuple[ToolCall, bool]], bool]


def _editable(value: Mapping[str, Any], name: str) -> bool:
    """Whether the interrupt lets ``name`` be resumed with an edit (a per-call interrupt
    says nothing: its middleware checks the edit against the tool's own schema)."""
    configs = value.get("review_configs")
    if not isinstance(configs, list):
        return True
    for config in configs:
        if isinstance(config, Mapping) and config.get("action_name") == name:
            return "edit" in (config.get("allowed_decisions") or ())
    return False


def _calls(value: Any) -> tuple[list[tuple[ToolCall, bool]], bool] | None:
    """The tool calls one interrupt asks about (each with whether it may be resumed with
    an edit), and whether it is a batched HITLRequest; None for an interrupt that is not
    a human-in-the-loop request."""
    if not isinstance(value, Mapping):
        return None
    if value.get("type") == "tool_approval":
        return [(ToolCall.of(str(value.get("name")), value.get("args")), True)], False
    requests = value.get("action_requests")
    if isinstance(requests, list):
        return [(ToolCall.of(str(r.get("name")), r.get("args")),
                 _editable(value, str(r.get("name")))) for r in requests], True
    return None


def _answer(call: ToolCall, decision: Decision, editable: bool) -> Answer:
    if decision.approved and decision.edited:
        if not editable:  # never the asked args after a person approved others
            return {"type": "reject", "message": (
                f"signoff approved {call.tool} only with edited args, and this interrupt "
                "does not allow an edit; the action was not run")}
        return {"type": "edit", "edited_action": {"name": call.tool,
                                                  "args": dict(decision.args or {})}}
    if decision.approved:
        return {"type": "approve"}
    return {"type": "reject", "message": refusal(call.tool, decision)}


def _resume(batched: bool, answers: list[Answer]) -> Any:
    return {"decisions": answers} if batched else answers[0]


def _pending(interrupts: Iterable[Any]) -> list[Pending]:
    found = []
    for item in interrupts:
        parsed = _calls(getattr(item, "value", item))
        if parsed is None:
            raise ValueError(f"not a human-in-the-loop interrupt: {item!r}")
        found.append((str(getattr(item, "id", "")), *parsed))
    return found


async def aresolve(interrupts: Iterable[Any], client: Signoff, *,
                   policy_id: str | None = None, goal: str | None = None
                   ) -> dict[str, Any]:
    """The resume value for ``Command(resume=...)``, keyed by interrupt id, after signoff
    decided every action the interrupts ask about (waiting for a person when needed)."""
    resume: dict[str, Any] = {}
    for interrupt_id, calls, batched in _pending(interrupts):
        answers = []
        for call, editable in calls:
            decision = await client.request(call.tool, call.args, policy_id=policy_id,
                                             goal=goal, idempotency_key=call.key,
                                             editable=editable)
            answers.append(_answer(call, decision, editable))
        resume[interrupt_id] = _resume(batched, answers)
    return resume


def resolve(interrupts: Iterable[Any], client: SignoffSync, *,
            policy_id: str | None = None, goal: str | None = None) -> dict[str, Any]:
    """`aresolve` for synchronous graphs."""
    resume: dict[str, Any] = {}
    for interrupt_id, calls, batched in _pending(interrupts):
        answers = [_answer(call, client.request(call.tool, call.args, policy_id=policy_id,
                                                goal=goal, idempotency_key=call.key,
                                                editable=editable), editable)
                   for call, editable in calls]
        resume[interrupt_id] = _resume(batched, answers)
    return resume
