"""Grants: the key an approval is remembered under, and which stored grant still covers
an action — the one place that rule is written (stores only return candidates by key).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from signoff.runtime.ids import grant_id
from signoff.runtime.models import Action, Grant, Scope, Task
from signoff.runtime.tools.canonical import canonical_json, sha256_hex


def rule_for(action: Action) -> str:
    """The rule an approval answers; binds the risk class into the grant key."""
    return f"ask:{action.risk.value if action.risk else 'SEND'}"


def grant_key(policy_id: str, action: Action) -> str:
    """``signoff:<policy_id>:<sha256(tool, capability, rule, fingerprint)>``."""
    digest = sha256_hex(canonical_json({
        "tool": action.tool, "capability": action.capability,
        "rule": rule_for(action), "fingerprint": action.fingerprint}))
    return f"signoff:{policy_id}:{digest}"


def make_grant(task: Task, action: Action, scope: Scope, *, actor: str, now: datetime) -> Grant:
    """The grant a person's approval of a task's action creates."""
    return grant_for(action, scope, policy_id=task.policy_id, task_id=task.id, actor=actor,
                     now=now)


def grant_for(action: Action, scope: Scope, *, policy_id: str, task_id: str | None,
              actor: str, now: datetime) -> Grant:
    """The grant an approval creates; `once` is used up by the action it approves.

    ``task_id`` None: the grant of an outside request (POST /v1/approvals), which covers
    later requests of the same ``policy_id`` only (see `covers`).
    """
    if action.capability is None or action.risk is None or action.fingerprint is None:
        raise ValueError("only prepared actions can be granted")
    return Grant(
        id=grant_id(), key=grant_key(policy_id, action), policy_id=policy_id,
        task_id=task_id, scope=scope, tool=action.tool, capability=action.capability,
        risk=action.risk, fingerprint=action.fingerprint,
        max_calls=1 if scope is Scope.ONCE else None, used=1, created_at=now,
        created_by=actor)


def covers(grant: Grant, *, task_id: str | None) -> bool:
    """True while ``grant`` allows its action again in task ``task_id``: not revoked, not
    used up, and either remembered (``always``, already scoped by its key's policy_id) or
    made in this very task (``session``; a ``once`` grant is used up by its own action).

    ``task_id`` None asks for an outside request: then only grants made by outside
    requests count (``session`` and ``always`` both last for the key's policy_id). A
    task's grants and an outside request's never cover each other, even when a caller
    names a policy_id that is also a schedule's name or a task's id.
    """
    if not grant.live:
        return False
    if task_id is None or grant.task_id is None:
        return task_id is None and grant.task_id is None
    return grant.scope is Scope.ALWAYS or grant.task_id == task_id


def first_valid(candidates: Iterable[Grant], *, task_id: str | None) -> Grant | None:
    """The oldest candidate (stored order) that covers the action in this task (or, with
    ``task_id`` None, in this outside request)."""
    return next((g for g in candidates if covers(g, task_id=task_id)), None)
