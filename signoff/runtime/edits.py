"""Edit before approve: a person's edited args become the action that runs.

The registry prepares the edited call as it prepares any step (args checked against the
tool's parameters, risk, targets and fingerprint recomputed), with the original's risk
as a floor: an edit can make an action riskier, never less risky. The policy then looks
at the edited action as if it were the one asked about; anything it would block (a
prohibition, a spent budget) or that can never run is refused, and nothing is decided.

Requests from agents that are not ours (POST /v1/approvals) cannot be edited: the agent
runs its own call after the answer, so an approval of different args would approve
something that never runs while the original runs unreviewed.
"""

from __future__ import annotations

from signoff.errors import ToolError
from signoff.runtime.engine import Engine
from signoff.runtime.models import Action, Approval, DecisionCode, JsonDict, Task, Verdict


class EditRefused(Exception):
    """Why edited args cannot be approved: ``code`` INVALID (bad args) or BLOCKED."""

    def __init__(self, code: DecisionCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def prepare_edit(engine: Engine, task: Task | None, approval: Approval,
                       args: JsonDict) -> Action | None:
    """The edited action to approve instead of ``approval.action``; None when the args
    are the asked action's own (nothing was edited). Raises `EditRefused`."""
    original = approval.action
    if task is None:
        raise EditRefused(DecisionCode.INVALID,
                          "args: a request from an outside agent cannot be edited (the agent "
                          "runs its own call); deny it and have the agent ask again")
    try:
        edited = engine.registry.prepare(Action(tool=original.tool, args=args,
                                                risk=original.risk))
    except ToolError as exc:
        raise EditRefused(DecisionCode.INVALID, f"args: {exc}") from exc
    # Args, not fingerprints: message content is left out of the fingerprint, and an
    # edited body is an edit all the same.
    if edited.args == original.args:
        return None
    # The task's pending action is the one being replaced: it must not count against the
    # budget the edited action is judged by.
    judged_in = task.model_copy(update={"pending_action": None})
    ev = await engine.policy.evaluate(judged_in, edited, engine.store, now=engine.clock.now())
    edited = ev.action or edited  # relabelled by the policy (a private network)
    if ev.verdict is Verdict.BLOCK:
        raise EditRefused(DecisionCode.BLOCKED,
                          f"the edited action would be blocked: {ev.reason}; nothing was "
                          f"decided")
    error = await engine.cannot_run(edited)
    if error is not None:
        raise EditRefused(DecisionCode.INVALID, f"args: the edited action cannot run: {error}")
    return edited
