"""Requests from agents that are not ours (POST /v1/approvals): one approval, no task.

An outside agent (Hermes, a LangGraph graph, a CI job, a script) asks about one action.
It goes through the same steps as a task's action, with the request's ``policy_id`` in
the task's place:

    prepare (registry for known tools, else the request's own labels) → Policy
    (prohibits, budgets, autonomy, grants of this policy_id) → settled at once (ALLOW or
    BLOCK, stored and audited) or a pending `Approval` with its card jobs → decided by
    the same `Decider` as a task's request (exactly once, audited) → expired by the same
    sweep → the caller reports what it did (`report_outcome`, once).

Schedules' unattended rules (cron_mode) do not apply: there is no schedule. ``approvals.
mode = "off"`` and ``evaluation.strict_yolo`` do, as they do for submitted tasks; smart
approval asks a person (the judge reads a task's goal and plan, which a request lacks).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from signoff.errors import BadArguments, Conflict, SignoffError
from signoff.runtime import coalesce, ids
from signoff.runtime.audit import new_args_key
from signoff.runtime.bounds import check_json
from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.denials import refusal_key
from signoff.runtime.engine import Engine
from signoff.runtime.events import audit_event
from signoff.runtime.models import (
    Action,
    Approval,
    ApprovalStatus,
    AuditEvent,
    JsonDict,
    RiskClass,
    RunMode,
    Scope,
    Task,
    Verdict,
)
from signoff.runtime.policy.policy import Evaluation
from signoff.runtime.policy.unattended import Outcome, resolve_unattended
from signoff.runtime.store.port import Change
from signoff.runtime.tools.base import (
    CONTENT_KEYS,
    Param,
    RedefinableTool,
    ToolContext,
    is_a,
    summary_of,
)
from signoff.runtime.tools.registry import ToolRegistry, fingerprint

log = logging.getLogger(__name__)

DEFAULT_RISK = RiskClass.DESTRUCTIVE
MAX_TIMEOUT = timedelta(days=7)


class OutcomeConflict(SignoffError):
    """The outcome of this request cannot be recorded (again)."""


class KeyReused(SignoffError):
    """This idempotency key was used for a different request."""


@dataclass(frozen=True)
class RequestSpec:
    """What an outside agent asks about (validated for shape by the API)."""

    tool: str
    args: JsonDict
    policy_id: str
    requester: str
    risk: RiskClass | None = None
    capability: str | None = None
    targets: tuple[str, ...] = ()
    content: tuple[str, ...] = ()
    goal: str | None = None
    why: str | None = None
    timeout: timedelta | None = None
    idempotency_key: str | None = None
    submitted_by: str | None = None  # the API caller, e.g. web:admin
    traceparent: str | None = None  # the caller's W3C traceparent (telemetry)
    editable: bool = False  # the caller runs edited args it is sent back
    # A digest of the tool's definition as the caller's agent saw it (mcp-gate: the
    # upstream's listing): bound into the fingerprint, so a grant covers that one only.
    definition: str | None = None
    # What the tool says it does, as the caller's agent was shown it (mcp-gate: the
    # upstream's listed description). Shown on the card as that claim, and nothing else:
    # not in the fingerprint, not in `request_digest` (``definition`` binds the grant).
    description: str | None = None


def request_digest(spec: RequestSpec) -> str:
    """What an idempotency key is bound to: the action asked (tool, args, risk, targets,
    content) and where its grants live (policy_id). A replay with anything else is another
    request, never an answer to this one: a key first used for a READ must not return
    "approved" for a send_email."""
    asked = {"tool": spec.tool, "args": spec.args,
             "risk": spec.risk.value if spec.risk else None, "targets": list(spec.targets),
             "content": list(spec.content), "policy_id": spec.policy_id}
    if spec.definition is not None:  # only when given: older requests keep their digest
        asked["definition"] = spec.definition
    try:
        return sha256_hex(canonical_json(asked))
    except (TypeError, ValueError) as exc:  # NaN or Infinity in args
        raise BadArguments(f"args cannot be fingerprinted: {exc}") from exc


@dataclass
class ForeignTool:
    """A tool signoff does not know, labelled by the request itself.

    It has the shape of a registry `Tool` so that the registry's rules apply to it as to
    any tool: `registry.fingerprint` (every argument but the content ones, plus the
    targets) and the card's summary ("Run <tool> on <targets>") and content lines.
    """

    name: str
    capability: str
    risk: RiskClass
    target_list: tuple[str, ...]
    content: tuple[str, ...]  # the request's content arguments, and the usual content keys
    description: str = "a tool of an outside agent"
    params: tuple[Param, ...] = ()

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        """The request's risk class."""
        return self.risk

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        """Every argument but the content ones, plus the targets."""
        fields = {k: v for k, v in args.items() if k not in self.content}
        return {"args": fields, "targets": list(self.target_list)}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        """The request's targets."""
        return self.target_list

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Never run here: the outside agent runs its own tools."""
        raise BadArguments(f"{self.name} is run by the agent that asked, not by signoff")


def prepare_request(registry: ToolRegistry, spec: RequestSpec) -> Action:
    """The action of an outside request as the policy sees it. A registry tool takes its
    risk, capability and fingerprint from the registry (the request may raise the risk,
    never lower it); any other name is labelled by the request (risk default
    DESTRUCTIVE)."""
    check_json(spec.args, "args")
    if spec.tool in registry:
        action = registry.prepare(Action(tool=spec.tool, args=spec.args, risk=spec.risk))
        _refuse_dropped(spec, action)
        # What the caller's agent was shown of an MCP tool (its server may describe it
        # otherwise by now); a built-in's card speaks in signoff's own words only, and no
        # caller puts words on it as "the server's".
        if spec.description is not None and is_a(registry.get(spec.tool), RedefinableTool):
            action = action.model_copy(update={"description": spec.description})
        return _defined(action, spec.definition)
    content = tuple(dict.fromkeys([*spec.content,
                                   *(k for k in spec.args if k in CONTENT_KEYS)]))
    tool = ForeignTool(name=spec.tool, capability=spec.capability or spec.tool,
                       risk=spec.risk or DEFAULT_RISK, target_list=spec.targets,
                       content=content)
    try:
        digest = fingerprint(tool, spec.args)
    except (TypeError, ValueError) as exc:
        raise BadArguments(f"args cannot be fingerprinted: {exc}") from exc
    return _defined(Action(tool=spec.tool, args=spec.args, risk=tool.risk,
                           capability=tool.capability, targets=spec.targets,
                           fingerprint=digest, summary=summary_of(tool, spec.args,
                                                                  spec.targets),
                           content=content, description=spec.description),
                    spec.definition)


def _defined(action: Action, definition: str | None) -> Action:
    """``action`` bound to the caller's definition of its tool: the fingerprint (and so
    every grant and remembered denial) covers that definition, as the registry's own MCP
    tools cover theirs. mcp-gate's upstream is a process of its own, which can be
    redefined while the daemon's copy (if it runs one at all) is not: without this, an
    Always given to "look at a path" still covered the tool once it deleted paths."""
    if definition is None:
        return action
    bound = sha256_hex(canonical_json({"fingerprint": action.fingerprint,
                                       "definition": definition}))
    return action.model_copy(update={"fingerprint": bound, "definition": definition})


def _refuse_dropped(spec: RequestSpec, action: Action) -> None:
    """BadArguments when preparing left out an argument the caller asked with.

    A task's action runs with the args it was prepared with, so dropping a stray one is
    harmless there. An outside caller runs its own call with its own args (mcp-gate
    forwards what its client sent): an argument the registry drops is missing from the
    card and the grant, yet sent all the same. It happens when the daemon knows a tool
    otherwise than the caller does (an MCP server upgraded since the daemon listed it)."""
    dropped = [key for key, value in spec.args.items()
               if value is not None and key not in action.args]
    if dropped:
        names = ", ".join(repr(key) for key in dropped)
        raise BadArguments(f"{action.tool} takes no argument {names} as this daemon knows "
                           "the tool; a call with it would run what no card shows")


class OutsideRequests:
    """Creates outside requests and records their outcomes (decisions are the Decider's)."""

    def __init__(self, *, engine: Engine) -> None:
        self.engine = engine
        self.store = engine.store

    def prepare(self, spec: RequestSpec) -> Action:
        """The action as the policy sees it (`prepare_request`)."""
        return prepare_request(self.engine.registry, spec)

    async def submit(self, spec: RequestSpec) -> tuple[Approval, bool]:
        """Store the request (settled or pending); returns it and whether it was a replay
        of an earlier request with the same idempotency key."""
        digest = None
        if spec.idempotency_key is not None:
            digest = request_digest(spec)
            found = await self.store.find_request(spec.idempotency_key)
            if found is not None:
                return self._replay(found, spec, digest), True
        action = self.prepare(spec)
        ev = await self._denied_earlier(spec.policy_id, action)
        if ev is None:
            ev = await self.engine.policy.evaluate_request(action, self.store,
                                                           policy_id=spec.policy_id,
                                                           now=self.engine.clock.now(),
                                                           principal=spec.submitted_by)
        action = ev.action or action  # relabelled by the policy (a private network)
        approval, event = self._build(spec, action, ev, digest)
        grouped = approval.status.open and self.engine.config.coalesce
        async with (self.engine.groups.hold(approval) if grouped
                    else contextlib.nullcontext()):
            if grouped:
                approval = await coalesce.join(self.store, approval)
            # The card of a pending request (or the edit of the card it joined), written
            # in the same commit (as for a task's).
            outbox = [coalesce.card_event(approval)] if approval.status.open else []
            change = Change(at=approval.requested_at, approval=approval, insert_approval=True,
                            audit=[event], outbox=outbox)
            stored = await self.store.commit(change)
        if not stored:
            # Lost a race with the same idempotency key: answer with the winner.
            found = (await self.store.find_request(spec.idempotency_key)
                     if spec.idempotency_key else None)
            if found is None or digest is None:
                raise Conflict(f"request {approval.id} could not be stored")
            return self._replay(found, spec, digest), True
        log.info("outside_request", extra={"approval_id": approval.id, "tool": action.tool,
                                           "status": approval.status.value,
                                           "policy_id": spec.policy_id})
        if approval.status.open:
            await self.engine.listener.approval_requested(None, approval)
        return approval, False

    def _replay(self, found: Approval, spec: RequestSpec, digest: str) -> Approval:
        """The request stored under the key, if ``spec`` asks the same; `KeyReused` if not.

        A request stored before keys were bound has no digest: it matches when the action
        prepared from ``spec`` is the one it stored, under the same policy_id."""
        if found.request_digest is not None:
            same = found.request_digest == digest
        else:
            mine, theirs = self.prepare(spec), found.action
            same = (found.policy_id == spec.policy_id and all(
                getattr(mine, f) == getattr(theirs, f)
                for f in ("tool", "args", "risk", "targets", "content")))
        if not same:
            raise KeyReused(f"the idempotency key was used for request {found.id}, which "
                            "asked something else")
        return found


    async def _denied_earlier(self, policy_id: str, action: Action) -> Evaluation | None:
        """A BLOCK when a person denied this very action (same fingerprint and content)
        for ``policy_id`` within ``approvals.remember_deny``: an agent retrying a refused
        call gets the answer at once instead of a fresh card each time."""
        window = self.engine.config.remember_deny
        if window <= timedelta(0):
            return None
        since = self.engine.clock.now() - window
        earlier = await self.store.refused_earlier(policy_id, refusal_key(action), since)
        if earlier is None:
            return None
        why = f": {earlier.reason}" if earlier.reason else ""
        return Evaluation(Verdict.BLOCK,
                          f"denied earlier by {earlier.decided_by or ''} ({earlier.id}){why}",
                          actor="auto:remember_deny")

    def _build(self, spec: RequestSpec, action: Action, ev: Evaluation,
               digest: str | None) -> tuple[Approval, AuditEvent]:
        cfg = self.engine.config
        now = self.engine.clock.now()
        timeout = min(spec.timeout or cfg.approval_timeout, MAX_TIMEOUT)
        approval = Approval(
            id=ids.approval_id(), task_id=None, action=action, policy_id=spec.policy_id,
            requester=spec.requester, goal=spec.goal, why=spec.why, verdict=ev.verdict,
            idempotency_key=spec.idempotency_key, request_digest=digest,
            submitted_by=spec.submitted_by, traceparent=spec.traceparent,
            editable=spec.editable, args_key=new_args_key(),
            allowed_scopes=cfg.scopes_for(action.risk), requested_at=now,
            expires_at=now + timeout, needed=cfg.rules.needed(action))
        verdict, actor, reason = ev.verdict, ev.actor or "auto:policy", ev.reason
        if verdict is Verdict.ASK_USER:
            pseudo = Task(id="", goal=spec.goal or "", mode=RunMode.INTERACTIVE)
            res = resolve_unattended(pseudo, cfg.unattended)
            if res.outcome in (Outcome.ALLOW, Outcome.BLOCK):
                verdict = Verdict.ALLOW if res.outcome is Outcome.ALLOW else Verdict.BLOCK
                actor, reason = res.actor or "auto:policy", res.reason
        if verdict is Verdict.ASK_USER:
            event = audit_event("evaluation", None, action, decision="ASK_USER",
                                approval=approval, reason=reason or "approval requested")
            return approval, event
        approved = verdict is Verdict.ALLOW
        settled = approval.model_copy(update={
            "status": ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED,
            "scope": Scope.ONCE if approved else Scope.DENY, "decided_by": actor,
            "decided_at": now, "reason": reason, "verdict": verdict})
        event = audit_event("evaluation", None, action, decision=verdict.value, actor=actor,
                            reason=reason, approval=settled,
                            scope="once" if approved else None)
        return settled, event

    async def report_outcome(self, approval: Approval, *, ok: bool, detail: str | None,
                             actor: str) -> Approval:
        """Record, once, what the caller did with a decided outside request (audited as an
        event of kind ``outcome``); `OutcomeConflict` when that cannot be."""
        if not approval.outside:
            raise OutcomeConflict(f"request {approval.id} belongs to task {approval.task_id}; "
                                  "the task records what its actions did")
        if not approval.status.final:
            raise OutcomeConflict(f"request {approval.id} is still {approval.status.value}")
        if approval.outcome is not None:
            raise OutcomeConflict(f"the outcome of request {approval.id} was already reported")
        now = self.engine.clock.now()
        outcome: JsonDict = {"ok": ok, "detail": detail, "reported_by": actor,
                             "reported_at": now.isoformat()}
        updated = approval.model_copy(update={"outcome": outcome})
        event = audit_event("outcome", None, approval.action, decision="ok" if ok else "error",
                            actor=actor, reason=detail, approval=updated)
        if not await self.store.commit(Change(at=now, approval=updated, outcome_for=approval.id,
                                              audit=[event])):
            raise OutcomeConflict(f"the outcome of request {approval.id} was already reported")
        return updated

