"""What an approval over the API may carry besides its scope: ``for`` and edited ``args``.

Both approve routes (POST /tasks/{id}/approve, POST /approvals/{id}/approve) read the
body here, so a bad duration is the same 422 on each; the rules about what fits which
answer (a time box only on session/always, edits only of a task's request, nothing the
policy would block) are the runtime's (`Decider.decide`), and its refusals become HTTP
answers here: 422 naming the field, 409 for an edit the policy would block.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from signoff.api.errors import ApiError, duration_field, invalid
from signoff.api.schemas import ApproveBody
from signoff.bot.ports import DecisionOutcome
from signoff.runtime.models import DecisionCode, JsonDict, Scope
from signoff.runtime.passkeys import REGISTER_PAGE


@dataclass(frozen=True)
class Terms:
    """The grant's time box and the edited args of one approval (both optional)."""

    lasts: timedelta | None = None
    args: JsonDict | None = None


NO_TERMS = Terms()


def terms_of(body: ApproveBody | None) -> tuple[Scope, Terms]:
    """The scope and terms of an approve body; 422 naming ``for`` for a bad duration
    (whether the answer may be time-boxed at all is the decider's rule)."""
    body = body or ApproveBody()
    lasts = duration_field("for", body.lasts) if body.lasts is not None else None
    return Scope(body.scope), Terms(lasts=lasts, args=body.args)


def refused_passkey(outcome: DecisionOutcome, approval_id: str, scope: Scope) -> None:
    """Raise the 403 of a decision that needed a passkey assertion, or whose assertion was
    refused (else nothing): it says where to get options and where to register one."""
    if outcome.code is DecisionCode.PASSKEY:
        raise ApiError(403, outcome.message, step_up="passkey",
                       options=f"/approvals/{approval_id}/passkey-options?decision={scope.value}",
                       register=REGISTER_PAGE)


def refused_terms(outcome: DecisionOutcome) -> None:
    """Raise the HTTP answer of a refusal about the terms themselves (else nothing)."""
    if outcome.code is DecisionCode.INVALID:
        field, sep, message = outcome.message.partition(": ")
        raise invalid(field, message) if sep and field in ("for", "args") else ApiError(
            422, outcome.message)
    if outcome.code is DecisionCode.BLOCKED:
        raise ApiError(409, outcome.message, state="blocked")
