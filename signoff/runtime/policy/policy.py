"""Policy: ALLOW, ASK_USER or BLOCK for one action, and grants that cover one action.

Evaluation order (seed "approvals and grants"): prohibitions → BLOCK (nothing overrides
them); a spent budget → BLOCK; autonomous risk classes → ALLOW; a live grant for this
exact action → ALLOW; a schedule's pre-authorized envelope → ALLOW; else ASK_USER.
What ASK_USER becomes (a request, an automatic approval or a block) depends on who can
answer; `signoff.runtime.policy.unattended` decides that. Which grant covers an action is
`signoff.runtime.policy.grants`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from signoff.runtime.models import (
    Action,
    Approval,
    Grant,
    RiskClass,
    Scope,
    Task,
    Verdict,
)
from signoff.runtime.policy.grants import first_valid, grant_key
from signoff.runtime.store.port import TaskStore


@dataclass(frozen=True)
class Evaluation:
    """The policy's verdict on one action, with why."""

    verdict: Verdict
    reason: str
    actor: str | None = None  # for ALLOW by grant: auto:grant
    grant: Grant | None = None


def _prohibited(action: Action, entries: Iterable[str]) -> str | None:
    for entry in entries:
        needle = entry.strip()
        if not needle:
            continue
        if action.risk is not None and needle.upper() == action.risk.value:
            return needle
        if needle in (action.tool, action.capability):
            return needle
    return None


@dataclass
class Policy:
    """The configured policy. ``preauthorized`` maps a schedule to its grant keys."""

    autonomous_risks: frozenset[RiskClass] = frozenset({RiskClass.READ, RiskClass.DRAFT})
    prohibit: tuple[str, ...] = ()
    budgets: Mapping[str, int] = field(default_factory=dict)
    preauthorized: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def budget_left(self, task: Task, action: Action) -> int | None:
        """Calls left for this capability in this task (a pending request holds one)."""
        cap = action.capability
        if cap is None or cap not in self.budgets:
            return None
        used = sum(1 for r in task.actions if r.capability == cap and r.outcome == "ok")
        if task.pending_action is not None and task.pending_action.capability == cap:
            used += 1
        return self.budgets[cap] - used

    async def evaluate(self, task: Task, action: Action, store: TaskStore) -> Evaluation:
        """ALLOW, ASK_USER or BLOCK for a prepared action of a task."""
        hit = _prohibited(action, task.prohibit)
        if hit:
            return Evaluation(Verdict.BLOCK, f"prohibited by the task ({hit})")
        hit = _prohibited(action, self.prohibit)
        if hit:
            return Evaluation(Verdict.BLOCK, f"prohibited by policy ({hit})")
        left = self.budget_left(task, action)
        if left is not None and left <= 0:
            return Evaluation(Verdict.BLOCK, f"budget for {action.capability} used up "
                              f"({self.budgets[action.capability or '']} per task)")
        if action.risk in self.autonomous_risks:
            return Evaluation(Verdict.ALLOW, "autonomous risk class")
        key = grant_key(task.policy_id, action)
        grant = first_valid(await store.grant_candidates(key), task_id=task.id)
        if grant is not None:
            return Evaluation(Verdict.ALLOW, f"{grant.scope.value} grant {grant.id}",
                              actor="auto:grant", grant=grant)
        if task.schedule and key in self.preauthorized.get(task.schedule, frozenset()):
            return Evaluation(Verdict.ALLOW, f"pre-authorized by schedule {task.schedule}",
                              actor="auto:grant")
        risk = action.risk.value if action.risk else "?"
        return Evaluation(Verdict.ASK_USER, f"{action.capability} ({risk}) needs approval")


def new_approval(task: Task, action: Action, *, approval_id: str, now: datetime,
                 expires_at: datetime, allowed: list[Scope], note: str | None = None,
                 approvers: list[str] | None = None) -> Approval:
    """A fresh pending request for one action of a task."""
    return Approval(id=approval_id, task_id=task.id, action=action, step=task.step_index,
                    allowed_scopes=allowed, requested_at=now, expires_at=expires_at,
                    note=note, approvers=approvers or [])
