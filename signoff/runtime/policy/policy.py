"""Policy: ALLOW, ASK_USER or BLOCK for one action, and grants that cover one action.

Evaluation order (seed "approvals and grants"): prohibitions → BLOCK (nothing overrides
them); a spent budget → BLOCK; the optional Cedar policy file (`policy.cedar`): a forbid
→ BLOCK, a plain permit → ALLOW, a permit with ``@ask`` → ASK_USER (past the autonomous
rule, though a grant still covers it); autonomous risk classes → ALLOW; a live grant for
this exact action → ALLOW; a schedule's pre-authorized envelope → ALLOW; else ASK_USER.
What ASK_USER becomes (a request, an automatic approval or a block) depends on who can
answer; `signoff.runtime.policy.unattended` decides that. Which grant covers an action is
`signoff.runtime.policy.grants`.

Before all of that, a network action (`net.NET_CAPABILITIES`) is judged by where it
goes (`signoff.runtime.policy.net`): the daemon's own address → BLOCK; a private network
not in ``policy.net_allow`` → the action is relabelled (risk at least SEND, never
autonomous, its summary ending "— private network: <host>") and judged as that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

import httpx

from signoff.runtime.audit import new_args_key
from signoff.runtime.models import (
    Action,
    ActionRecord,
    Approval,
    Grant,
    RiskClass,
    Scope,
    Task,
    Verdict,
)
from signoff.runtime.policy.cedar import CedarAnswer, CedarPolicy, CedarRequest
from signoff.runtime.policy.grants import first_valid, grant_key, grants_home
from signoff.runtime.policy.net import (
    NET_CAPABILITIES,
    PRIVATE_NETWORK,
    NetKind,
    NetRule,
    url_parts,
)
from signoff.runtime.store.port import TaskStore

CEDAR_ACTOR = "auto:cedar"  # who approved what a Cedar permit let through


@dataclass(frozen=True)
class Evaluation:
    """The policy's verdict on one action, with why."""

    verdict: Verdict
    reason: str
    actor: str | None = None  # for ALLOW by grant: auto:grant
    grant: Grant | None = None
    # The action as the policy judged it, when that differs from the one it was given (a
    # private-network destination): what is asked about, granted and run.
    action: Action | None = None
    # The Cedar policies that decided (by their @id, else policy0, policy1…), if any.
    policies: tuple[str, ...] = ()


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


def _ran(record: ActionRecord) -> bool:
    """True when the record's tool was called, whatever it answered. A call that failed
    may still have had its effect (a command that did half its work and exited 1, a
    webhook the server took and answered 500), and an agent is told its error and may
    call again: counting successes only would let it call for ever. A call refused
    before its tool ran (blocked, denied, timed out, or a check that failed: decision
    ``block``) used nothing."""
    return record.outcome == "ok" or (record.outcome == "error" and record.decision != "block")


@dataclass
class Policy:
    """The configured policy. ``preauthorized`` maps a schedule to its grant keys."""

    autonomous_risks: frozenset[RiskClass] = frozenset({RiskClass.READ, RiskClass.DRAFT})
    prohibit: tuple[str, ...] = ()
    budgets: Mapping[str, int] = field(default_factory=dict)
    preauthorized: Mapping[str, frozenset[str]] = field(default_factory=dict)
    net: NetRule = field(default_factory=NetRule)
    cedar: CedarPolicy | None = None

    def budget_left(self, task: Task, action: Action) -> int | None:
        """Calls left for this capability in this task: every call its tool ran counts, failed
        ones too (`_ran`), and a pending request holds one."""
        cap = action.capability
        if cap is None or cap not in self.budgets:
            return None
        used = sum(1 for r in task.actions if r.capability == cap and _ran(r))
        if task.pending_action is not None and task.pending_action.capability == cap:
            used += 1
        return self.budgets[cap] - used

    async def evaluate(self, task: Task, action: Action, store: TaskStore, *,
                       now: datetime) -> Evaluation:
        """ALLOW, ASK_USER or BLOCK for a prepared action of a task at ``now`` (the
        Clock's time, which decides whether a time-boxed grant still covers it)."""
        judged, refused = await self.network(action)
        if refused:
            return Evaluation(Verdict.BLOCK, refused)
        hit = _prohibited(judged, task.prohibit)
        if hit:
            return _as_judged(Evaluation(Verdict.BLOCK, f"prohibited by the task ({hit})"),
                              action, judged)
        left = self.budget_left(task, judged)
        who = f"schedule:{task.schedule}" if task.schedule else (task.submitted_by or "")
        ev = await self._judge(judged, store, policy_id=task.policy_id, task_id=task.id,
                               schedule=task.schedule, budget_left=left, per="task", now=now,
                               principal=who, definition=task.schedule_definition)
        return _as_judged(ev, action, judged)

    async def evaluate_request(self, action: Action, store: TaskStore, *,
                               policy_id: str, now: datetime,
                               principal: str | None = None,
                               replacing: Action | None = None) -> Evaluation:
        """The same evaluation for an outside request: budgets count the requests of its
        ``policy_id`` (pending ones reserve a unit), grants are those of that policy_id,
        and no schedule pre-authorizes anything. ``principal`` is the caller's API identity
        (``web:<name>``) for Cedar — never the request's self-declared ``requester`` label,
        which a hostile caller could set to anyone's name. ``replacing``: the pending
        request this action is an edit of; its reserved unit is the edit's own, not counted
        twice."""
        judged, refused = await self.network(action)
        if refused:
            return Evaluation(Verdict.BLOCK, refused)
        left = None
        cap = judged.capability
        if cap is not None and cap in self.budgets:
            left = self.budgets[cap] - await store.count_requests(policy_id, cap)
            if replacing is not None and replacing.capability == cap:
                left += 1
        ev = await self._judge(judged, store, policy_id=policy_id, task_id=None,
                               schedule=None, budget_left=left, per="policy_id", now=now,
                               principal=principal or "",
                               grants_under=grants_home(policy_id, asked_by=principal))
        return _as_judged(ev, action, judged)

    async def network(self, action: Action) -> tuple[Action, str | None]:
        """``action`` as judged by where it goes, and why it is refused (None: it is not).
        Only network capabilities; targets that are not http(s) URLs are not places."""
        if action.capability not in NET_CAPABILITIES:
            return action, None
        private: list[str] = []
        for target in action.targets:
            try:
                if url_parts(target)[0] not in ("http", "https"):
                    continue
                dest = await self.net.destination(target)
            except (httpx.InvalidURL, ValueError):
                continue
            if dest.kind is NetKind.OWN:
                return action, (f"{target} is the signoff daemon's own address "
                                f"({dest.shown}); network tools never reach it")
            if dest.kind is NetKind.PRIVATE:
                private.append(dest.shown)
        if not private:
            return action, None
        risk = action.risk if action.risk and action.risk.rank >= RiskClass.SEND.rank \
            else RiskClass.SEND
        summary = (f"{action.summary or 'Run ' + action.tool} — {PRIVATE_NETWORK}: "
                   f"{', '.join(private)}")
        return action.model_copy(update={"risk": risk, "summary": summary,
                                         "private_network": True}), None

    async def _judge(self, action: Action, store: TaskStore, *, policy_id: str,
                     task_id: str | None, schedule: str | None, budget_left: int | None,
                     per: str, now: datetime, principal: str,
                     grants_under: str | None = None,
                     definition: str | None = None) -> Evaluation:
        hit = _prohibited(action, self.prohibit)
        if hit:
            return Evaluation(Verdict.BLOCK, f"prohibited by policy ({hit})")
        if budget_left is not None and budget_left <= 0:
            return Evaluation(Verdict.BLOCK, f"budget for {action.capability} used up "
                              f"({self.budgets[action.capability or '']} per {per})")
        # No policy file (the default): no request to build for nobody to read.
        said = _NO_ANSWER if self.cedar is None else self.cedar.judge(CedarRequest(
            principal=principal, action=action, policy_id=policy_id, schedule=schedule,
            now=now))
        if said.verdict is Verdict.BLOCK:
            return Evaluation(Verdict.BLOCK, said.reason, policies=said.policies)
        # A permit never lifts the private-network rule: net_allow is the place for that.
        if said.verdict is Verdict.ALLOW and not action.private_network:
            # An effect a person did not approve: run as an audited automatic approval.
            auto = action.risk in self.autonomous_risks
            return Evaluation(Verdict.ALLOW, said.reason, actor=None if auto else CEDAR_ACTOR,
                              policies=said.policies)
        asked = said.verdict is Verdict.ASK_USER
        if not asked and action.risk in self.autonomous_risks and not action.private_network:
            return Evaluation(Verdict.ALLOW, "autonomous risk class")
        key = grant_key(grants_under or policy_id, action)
        grant = first_valid(await store.grant_candidates(key), task_id=task_id, now=now,
                            definition=definition)
        if grant is not None:
            return Evaluation(Verdict.ALLOW, f"{grant.scope.value} grant {grant.id}",
                              actor="auto:grant", grant=grant)
        if schedule and key in self.preauthorized.get(schedule, frozenset()):
            return Evaluation(Verdict.ALLOW, f"pre-authorized by schedule {schedule}",
                              actor="auto:grant")
        if asked:
            return Evaluation(Verdict.ASK_USER, said.reason, policies=said.policies)
        risk = action.risk.value if action.risk else "?"
        return Evaluation(Verdict.ASK_USER, f"{action.capability} ({risk}) needs approval")


_NO_ANSWER = CedarAnswer(None)


def _as_judged(ev: Evaluation, given: Action, judged: Action) -> Evaluation:
    return ev if judged is given else replace(ev, action=judged)


def new_approval(task: Task, action: Action, *, approval_id: str, now: datetime,
                 expires_at: datetime, allowed: list[Scope], note: str | None = None,
                 approvers: list[str] | None = None, why: str | None = None,
                 needed: int = 1) -> Approval:
    """A fresh pending request for one action of a task (``needed``: its quorum)."""
    return Approval(id=approval_id, task_id=task.id, action=action, step=task.step_index,
                    allowed_scopes=allowed, requested_at=now, expires_at=expires_at,
                    note=note, approvers=approvers or [], why=why, policy_id=task.policy_id,
                    submitted_by=task.submitted_by, needed=needed,
                    traceparent=task.traceparent, args_key=new_args_key())
