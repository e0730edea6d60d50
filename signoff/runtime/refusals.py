"""What a task was refused, and the one wording of how it ended.

A run that finished while some of its actions were refused (denied, expired unanswered,
blocked by the policy or by `cron_mode`) did not do everything it set out to do, so it
is never announced as a plain success: the team channels, `signoff tasks`, `signoff
schedules` and the console all say it with `outcome_words`, from ``result.refused``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from signoff.runtime.models import ActionRecord, Approval, ApprovalStatus, JsonDict

# ActionRecord.outcome values of an action that did not run because it was refused.
REFUSED_OUTCOMES = frozenset({"denied", "blocked", "timed_out", "expired"})


def refused_actions(actions: Sequence[ActionRecord]) -> list[JsonDict]:
    """``result.refused``: every refused action as ``{"step", "tool", "reason"}``."""
    return [{"step": r.step, "tool": r.tool, "reason": r.error or r.outcome}
            for r in actions if r.outcome in REFUSED_OUTCOMES]


def refused_count(result: Mapping[str, Any] | None) -> int:
    """How many actions ``result.refused`` lists."""
    refused = (result or {}).get("refused")
    return len(refused) if isinstance(refused, list) else 0


def outcome_words(state: str, result: Mapping[str, Any] | None) -> str:
    """How a task ended, in words: ``completed, 1 action refused`` rather than a bare
    ``completed`` when something was refused; other states as they are."""
    count = refused_count(result)
    if state != "completed" or count == 0:
        return state
    return f"completed, {count} action{'' if count == 1 else 's'} refused"


def reported_words(approval: Approval) -> str | None:
    """What the caller of an approved outside request said it did: an approval is consent,
    not a done deed, so one without a report says so (None when there is nothing to say:
    a task's request, or one that was not approved)."""
    if approval.task_id is not None or approval.status is not ApprovalStatus.APPROVED:
        return None
    outcome = approval.outcome
    if outcome is None:
        return "outcome not reported by the caller"
    detail = f": {outcome['detail']}" if outcome.get("detail") else ""
    return f"caller reported {'done' if outcome.get('ok') else 'failure'}{detail}"
