"""The OpenAI Agents SDK: signoff decides its tool approvals.

Give each gated tool ``needs_approval=approvals.needs_approval("<its name>")``; run;
while the result has interruptions, let signoff resolve them and run on from the state::

    approvals = SignoffApprovals(client, policy_id="run-42")

    @function_tool(needs_approval=approvals.needs_approval("send_email"))
    async def send_email(to: str, body: str) -> str: ...

    result = await Runner.run(agent, "…")
    while result.interruptions:
        result = await Runner.run(agent, await approvals.resolve(result))

`needs_approval` asks signoff without waiting: what the policy or a live grant settles
(READ, a Session or Always answer given earlier) runs without an interruption; anything
else interrupts the run, and `resolve` waits for the person's answer on that same
request. A denial is passed to the model with ``rejection_message`` = signoff's reason;
the SDK's own ``always_approve``/``always_reject`` are never set (grants live in signoff).

An approval with args a person edited in signoff cannot be run as such: the SDK runs the
interrupted call with the model's own arguments and offers no way to change them. It is
rejected instead, and the rejection message gives the model the edited args: the asked
args never run after a person approved other ones, and a new call with the edited args
is a new request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from signoff_client.frameworks import ToolCall, refusal
from signoff_client.sdk import Decision, Signoff

Approver = Callable[[Any, dict[str, Any], str], Awaitable[bool]]


def _arguments(raw: Any) -> dict[str, Any]:
    """A function call's arguments: the raw item's JSON text (or already a dict)."""
    value = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value or "{}")
    except (TypeError, ValueError):
        return {"arguments": value}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _call_id(raw: Any) -> str:
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return str(value or "")


class SignoffApprovals:
    """Tool approvals of one agent run (or several sharing a ``policy_id``)."""

    def __init__(self, client: Signoff, *, policy_id: str | None = None,
                 goal: str | None = None) -> None:
        self.client = client
        self.policy_id = policy_id
        self.goal = goal
        # The request asked in needs_approval, per call (`_key`): resolve waits on that
        # one instead of asking again.
        self._asked: dict[tuple[str, str, str], tuple[ToolCall, Decision]] = {}

    def needs_approval(self, tool: str) -> Approver:
        """The SDK's ``needs_approval`` callable for ``tool`` (the SDK does not pass the
        tool's name to it): it answers False only when signoff approved at once."""
        async def ask(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
            call = ToolCall.of(tool, params)
            decision = await self.client.request(
                call.tool, call.args, policy_id=self.policy_id, goal=self.goal,
                idempotency_key=call.key, wait=False, editable=True)
            if decision.approved:
                return False
            self._asked[_key(call, call_id)] = (call, decision)
            return True
        return ask

    async def decide(self, tool: str, raw: Any) -> Decision:
        """signoff's answer for one interrupted call, waiting for a person if needed."""
        call = ToolCall.of(tool, _arguments(raw))
        asked = self._asked.pop(_key(call, _call_id(raw)), None)
        if asked is None:
            return await self.client.request(call.tool, call.args, policy_id=self.policy_id,
                                             goal=self.goal, idempotency_key=call.key,
                                             editable=True)
        _, decision = asked
        if decision.pending and decision.id:
            return await self.client.wait(decision.id)
        return decision

    async def resolve(self, result: Any) -> Any:
        """A RunState with every interruption of ``result`` approved or rejected."""
        state = result.to_state()
        for item in result.interruptions:
            tool = str(item.name or "tool")
            decision = await self.decide(tool, item.raw_item)
            if decision.approved and decision.edited:
                state.reject(item, rejection_message=edited_words(tool, decision))
            elif decision.approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=refusal(tool, decision))
        return state


def edited_words(tool: str, decision: Decision) -> str:
    """What the model reads when a person approved ``tool`` only with edited args."""
    args = json.dumps(decision.args or {}, sort_keys=True)
    by = f" by {decision.decided_by}" if decision.decided_by else ""
    return (f"signoff approved {tool} only with edited args{by}: {args}. The OpenAI Agents "
            f"SDK cannot run a call with changed args, so the call was not run. To do it, "
            f"call {tool} again with exactly these args (signoff asks about that call).")


def _key(call: ToolCall, call_id: str) -> tuple[str, str, str]:
    """What ties an interruption to the request asked for it: the tool, the call id and
    the arguments. Model servers reuse call ids (``call_0``) across runs sharing one
    SignoffApprovals, so neither the id nor the args alone say which call it was, and
    without the tool an approval of one tool answered another's interruption."""
    return call.tool, call_id, json.dumps(call.args, sort_keys=True, separators=(",", ":"))
