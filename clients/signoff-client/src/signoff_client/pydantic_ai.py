"""pydantic-ai: signoff answers an agent's deferred tool approvals.

A tool registered with ``requires_approval=True`` (or one that raises
``ApprovalRequired``) ends a run with ``DeferredToolRequests`` as its output when the
agent's ``output_type`` includes it. `resolve_deferred` asks signoff about each approval
and returns the ``DeferredToolResults`` to run on with::

    result = await agent.run("…", output_type=[str, DeferredToolRequests])
    while isinstance(result.output, DeferredToolRequests):
        results = await resolve_deferred(result.output, client, policy_id="run-42")
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=results,
                                 output_type=[str, DeferredToolRequests])

An approval is ``ToolApproved(override_args=<a copy of the args signoff was shown>)``, so
the tool runs with exactly those, whatever the message history holds when the run goes
on (the deferred call's args are the history's own dict, which may change while a
person decides); an approval with args a person edited in signoff is
``ToolApproved(override_args=<the edited args>)`` (the tool runs with those, never the
asked ones); anything else ``ToolDenied(<signoff's reason>)``, which the model reads as
the tool's result.

The results are the caller's to pass on: pydantic-ai runs what ``deferred_tool_results``
says, so whoever builds that value decides: build it only with `resolve_deferred`. Calls
deferred for external execution are left to the caller. Needs ``pydantic-ai``
(``pip install 'signoff-client[pydantic-ai]'``).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

from signoff_client.frameworks import ToolCall, refusal
from signoff_client.sdk import Decision, Signoff


async def resolve_deferred(requests: DeferredToolRequests, client: Signoff, *,
                           policy_id: str | None = None, goal: str | None = None
                           ) -> DeferredToolResults:
    """Every approval in ``requests`` decided by signoff (waiting for a person if needed)."""
    approvals: dict[str, Any] = {}
    answered_by: dict[str, str] = {}
    for part in requests.approvals:
        # A copy nobody else holds, taken before asking: it is what signoff shows and
        # what runs.
        held = ToolCall(part.tool_name, copy.deepcopy(part.args_as_dict()))
        shown = ToolCall.of(held.tool, held.args)
        decision = await client.request(shown.tool, shown.args, policy_id=policy_id,
                                         goal=goal, idempotency_key=held.key, editable=True)
        approvals[part.tool_call_id] = _result(held, decision)
        if decision.decided_by:
            answered_by[part.tool_call_id] = decision.decided_by
    return DeferredToolResults(approvals=approvals, answered_by=answered_by)


def _result(call: ToolCall, decision: Decision) -> ToolApproved | ToolDenied:
    if not decision.approved:
        return ToolDenied(refusal(call.tool, decision))
    if decision.edited:
        return ToolApproved(override_args=dict(decision.args or {}))
    return ToolApproved(override_args=call.args)
