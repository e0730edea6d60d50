"""Edit before approve: a person's edited args become the action that runs.

The edited call is prepared as the request it replaces was: a task's step by the registry
(args checked against the tool's parameters, risk, targets and fingerprint recomputed),
an outside request (POST /v1/approvals) by `outside.prepare_request` with the request's
own labels. The original's risk is a floor: an edit can make an action riskier, never
less risky. The tool stays the same (a changed tool name is a new request, never an
edit). The policy then looks at the edited action as if it were the one asked about;
anything it would block (a prohibition, a spent budget), that would need more approvals
than the one being given, or that can never run is refused, and nothing is decided.

An outside agent runs its own call, so its request can be edited only when it asked with
``"editable": true`` (it runs edited args it is sent back): it receives them with the
decision (``"edited": true, "args": …`` on GET /v1/approvals/{id}) and runs those or
nothing. Any other outside request's edit is refused: its caller would run the original.
A tool signoff does not know has the targets its caller named, which signoff cannot
recompute: its edit must keep every one of them among the args' values.
"""

from __future__ import annotations

from typing import Any

from signoff.errors import SignoffError, ToolError
from signoff.runtime.engine import Engine
from signoff.runtime.models import Action, Approval, DecisionCode, JsonDict, Task, Verdict
from signoff.runtime.outside import RequestSpec, prepare_request
from signoff.runtime.policy.policy import Evaluation


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
    if task is None and not approval.editable:
        raise EditRefused(DecisionCode.INVALID,
                          "args: this request's caller runs its own call and did not ask "
                          'with "editable": true; deny it and have the agent ask again')
    edited = _prepare(engine, task, approval, args)
    # Args, not fingerprints: message content is left out of the fingerprint, and an
    # edited body is an edit all the same.
    if edited.args == original.args:
        return None
    ev = await _evaluate(engine, task, approval, edited)
    edited = ev.action or edited  # relabelled by the policy (a private network)
    if ev.verdict is Verdict.BLOCK:
        raise EditRefused(DecisionCode.BLOCKED,
                          f"the edited action would be blocked: {ev.reason}; nothing was "
                          f"decided")
    needed = engine.config.rules.needed(edited)
    if needed > approval.needed:  # one answer cannot stand in for a quorum
        raise EditRefused(DecisionCode.INVALID,
                          f"args: the edited action needs {needed} approvals; deny this "
                          f"request and have it asked again as edited")
    if task is not None:  # an outside agent runs its own tools, not signoff's
        error = await engine.cannot_run(edited)
        if error is not None:
            raise EditRefused(DecisionCode.INVALID,
                              f"args: the edited action cannot run: {error}")
    return edited


def _prepare(engine: Engine, task: Task | None, approval: Approval, args: JsonDict) -> Action:
    """The edited call, labelled as the request it replaces was."""
    original = approval.action
    try:
        if task is not None:
            return engine.registry.prepare(Action(tool=original.tool, args=args,
                                                  risk=original.risk))
        _keeps_targets(engine, original, args)
        return prepare_request(engine.registry, RequestSpec(
            tool=original.tool, args=args, policy_id=approval.policy_id or approval.id,
            requester=approval.requester or "", risk=original.risk,
            capability=original.capability, targets=original.targets,
            content=original.content, definition=original.definition,
            description=original.description))
    except (ToolError, SignoffError) as exc:
        raise EditRefused(DecisionCode.INVALID, f"args: {exc}") from exc


def _keeps_targets(engine: Engine, original: Action, args: JsonDict) -> None:
    """A tool signoff does not know keeps its caller's targets: each must still be a value
    in the edited args, else the request would name places the edit no longer goes."""
    if original.tool in engine.registry:
        return  # the registry recomputes the targets from the args
    values = set(_strings(args))
    gone = [t for t in original.targets if t not in values]
    if gone:
        raise EditRefused(DecisionCode.INVALID,
                          f"args: the edit drops {', '.join(gone)}, which the request named "
                          f"as its target; signoff cannot tell the targets of "
                          f"{original.tool!r} — deny it and have the agent ask again")


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value (bounded by the intake's depth limit)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


async def _evaluate(engine: Engine, task: Task | None, approval: Approval,
                    edited: Action) -> Evaluation:
    """The policy's view of the edited action in the place of the pending one, which
    must not count against the budget the edit is judged by."""
    now = engine.clock.now()
    if task is not None:
        judged_in = task.model_copy(update={"pending_action": None})
        return await engine.policy.evaluate(judged_in, edited, engine.store, now=now)
    return await engine.policy.evaluate_request(
        edited, engine.store, policy_id=approval.policy_id or approval.id, now=now,
        principal=approval.submitted_by, replacing=approval.action)
