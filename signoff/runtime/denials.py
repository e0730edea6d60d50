"""What makes a retried action "the same" as a refused one, and which refusals are
remembered (``approvals.remember_deny``).

Below the store, because the store keeps a person's refusals under this key (the
``refusals`` table) so that a retry finds one in a single index probe; the agent loop
and the outside requests (`signoff.runtime.outside`) compare with the same key.
"""

from __future__ import annotations

from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.models import Action, Approval, ApprovalStatus


def remembered_refusal(approval: Approval) -> str | None:
    """The refusal key under which a denied outside request is remembered for
    approvals.remember_deny, or None: only a person's deny is remembered, not a refusal by
    the policy, a budget or remember_deny itself (an agent's retries must not stand in
    for, or crowd out, the person's answer)."""
    if (approval.task_id is not None or approval.status is not ApprovalStatus.DENIED
            or approval.decided_at is None or (approval.decided_by or "").startswith("auto:")):
        return None
    return refusal_key(approval.action)


def refusal_key(action: Action) -> str:
    """What makes a retried action "the same" as a refused one: its fingerprint (what a
    grant covers) and its content (a changed message is a new question)."""
    try:
        content = canonical_json([action.args.get(k) for k in sorted(action.content)])
    except (TypeError, ValueError):  # no one JSON spelling (NaN): never "the same" again
        return f"{action.fingerprint}:unique:{id(action)}"
    return f"{action.fingerprint}:{sha256_hex(content)[:16]}"
