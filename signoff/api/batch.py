"""One answer for several requests: POST /approvals/batch and the console's multi-select.

Only once and deny: a batch never creates a session or always grant (one look at a list
is not the look a standing permission deserves). Each id is decided exactly as a click
on its own card would be — authorized, compare-and-set, audited — and gets the status
its own route would answer: 200, 403 (not yours to decide), 404 (unknown), 409 (already
decided, or its task moved on).
"""

from __future__ import annotations

from collections.abc import Sequence

from signoff.api.context import ApiContext
from signoff.api.schemas import BatchResultOut
from signoff.bot.ports import Actor, DecisionEvent, DecisionHandler
from signoff.runtime.models import ApprovalStatus, DecisionCode, Scope

BATCH_SCOPES = (Scope.ONCE, Scope.DENY)


async def decide_one(ctx: ApiContext, handler: DecisionHandler, actor: Actor,
                     approval_id: str, scope: Scope, reason: str | None) -> BatchResultOut:
    """One request of a batch, answered as its own route would (never raised)."""
    assert scope in BATCH_SCOPES
    approval = await ctx.store.get_approval(approval_id)
    if approval is None:
        return BatchResultOut(id=approval_id, status=404,
                              detail=f"no approval request {approval_id}")
    if approval.status is not ApprovalStatus.PENDING:
        return BatchResultOut(id=approval_id, status=409,
                              detail=f"request {approval_id} is already {approval.status.value}")
    outcome = await handler(DecisionEvent(
        approval_id=approval_id, scope=scope, surface="web", actor=actor,
        reason=reason if scope is Scope.DENY else None))
    if outcome.accepted:
        return BatchResultOut(id=approval_id, status=200, detail=outcome.message)
    if outcome.code in (DecisionCode.NOT_AUTHORIZED, DecisionCode.PASSKEY):
        return BatchResultOut(id=approval_id, status=403, detail=outcome.message)
    return BatchResultOut(id=approval_id, status=409, detail=outcome.message)


async def decide_all(ctx: ApiContext, handler: DecisionHandler, actor: Actor,
                     ids: Sequence[str], scope: Scope,
                     reason: str | None) -> list[BatchResultOut]:
    """Every id in order; one id's failure never stops the others."""
    return [await decide_one(ctx, handler, actor, approval_id, scope, reason)
            for approval_id in ids]


def summary(results: Sequence[BatchResultOut], scope: Scope) -> str:
    """One line for the person who sent the batch: how many went through, and why the
    others did not."""
    done = sum(1 for r in results if r.status == 200)
    words = "approved once" if scope is Scope.ONCE else "denied"
    line = f"{done} of {len(results)} requests {words}"
    failed = [f"{r.id}: {r.detail}" for r in results if r.status != 200]
    return line + (f"; not decided: {'; '.join(failed[:5])}" if failed else "")
