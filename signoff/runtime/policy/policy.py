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

    async def evaluate(self, task: Task, action: Action, store: TaskStore, *,
                       now: datetime) -> Evaluation:
        """ALLOW, ASK_USER or BLOCK for a prepared action of a task at ``now`` (the
        Clock's time, which decides whether a time-boxed grant still covers it)."""
        hit = _prohibited(action, task.prohibit)
        if hit:
            return Evaluation(Verdict.BLOCK, f"prohibited by the task ({hit})")
        left = self.budget_left(task, action)
        return await self._judge(action, store, policy_id=task.policy_id, task_id=task.id,
                                 schedule=task.schedule, budget_left=left, per="task", now=now)

    async def evaluate_request(self, action: Action, store: TaskStore, *,
                               policy_id: str, now: datetime) -> Evaluation:
        """The same evaluation for an outside request: budgets count the requests of its
        ``policy_id`` (pending ones reserve a unit), grants are those of that policy_id,
        and no schedule pre-authorizes anything."""
        left = None
        cap = action.capability
        if cap is not None and cap in self.budgets:
            left = self.budgets[cap] - await store.count_requests(policy_id, cap)
        return await self._judge(action, store, policy_id=policy_id, task_id=None,
                                 schedule=None, budget_left=left, per="policy_id", now=now)

    async def _judge(self, action: Action, store: TaskStore, *, policy_id: str,
                     task_id: str | None, schedule: str | None, budget_left: int | None,
                     per: str, now: datetime) -> Evaluation:
        hit = _prohibited(action, self.prohibit)
        if hit:
            return Evaluation(Verdict.BLOCK, f"prohibited by policy ({hit})")
        if budget_left is not None and budget_left <= 0:
            return Evaluation(Verdict.BLOCK, f"budget for {action.capability} used up "
                              f"({self.budgets[action.capability or '']} per {per})")
        if action.risk in self.autonomous_risks:
            return Evaluation(Verdict.ALLOW, "autonomous risk class")
        key = grant_key(policy_id, action)
        grant = first_valid(await store.grant_candidates(key), task_id=task_id, now=now)
        if grant is not None:
            return Evaluation(Verdict.ALLOW, f"{grant.scope.value} grant {grant.id}",
                              actor="auto:grant", grant=grant)
        if schedule and key in self.preauthorized.get(schedule, frozenset()):
            return Evaluation(Verdict.ALLOW, f"pre-authorized by schedule {schedule}",
                              actor="auto:grant")
        risk = action.risk.value if action.risk else "?"
        return Evaluation(Verdict.ASK_USER, f"{action.capability} ({risk}) needs approval")


def new_approval(task: Task, action: Action, *, approval_id: str, now: datetime,
                 expires_at: datetime, allowed: list[Scope], note: str | None = None,
                 approvers: list[str] | None = None, why: str | None = None,
                 needed: int = 1) -> Approval:
    """A fresh pending request for one action of a task (``needed``: its quorum)."""
    return Approval(id=approval_id, task_id=task.id, action=action, step=task.step_index,
                    allowed_scopes=allowed, requested_at=now, expires_at=expires_at,
                    note=note, approvers=approvers or [], why=why, policy_id=task.policy_id,
                    submitted_by=task.submitted_by, needed=needed)
