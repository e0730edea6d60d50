"""The engine: plan a task once, run its safe steps, pause on gated ones, resume.

`advance()` takes a task this node has claimed and moves it as far as it can go: to
`waiting_approval` (a request stored with the pending action), `completed` or `failed`.
Resuming never re-plans: the stored pending action runs, then the remaining stored
steps. Autonomous steps commit nothing until the task pauses or ends (a crash re-runs
them, which is safe for READ and DRAFT); a gated action is committed as `executing`
before it runs, so a crash mid-send comes back to a person instead of sending twice.
An action that can never succeed (a path outside the work dir, a channel no surface
reaches: the registry's `check`) fails at once, audited, and nobody is asked about it.

A goal without steps goes to the engine's `TaskRunner` when it has one (the agent loop,
`engine/agent.py`), which works turn by turn with the same policy (`route`), the same
pause (`request_approval`) and the same public moves as the steps here: `execute` and
`record` an action, `save` the task, and end it with `complete`, `fail` or `block`. No
other module calls a private method of the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from signoff.errors import (
    BadArguments,
    Conflict,
    PlannerError,
    SignoffError,
    StoreUnavailable,
    ToolError,
)
from signoff.runtime import coalesce, ids
from signoff.runtime.clock import Clock
from signoff.runtime.events import (
    EngineListener,
    NullListener,
    TaskEvent,
    audit_event,
)
from signoff.runtime.models import (
    ALL_SCOPES,
    Action,
    ActionRecord,
    Approval,
    AuditEvent,
    RiskClass,
    RunMode,
    Scope,
    Task,
    TaskState,
    Verdict,
)
from signoff.runtime.outages import Backoff, Outages, failing
from signoff.runtime.people import People
from signoff.runtime.planning.planner import Planner, call_planner
from signoff.runtime.policy.policy import Evaluation, Policy, new_approval
from signoff.runtime.policy.quorum import ApprovalRules
from signoff.runtime.policy.route import Route, RouteKind, auto_words, gated_audit
from signoff.runtime.policy.unattended import (
    ApprovalMode,
    Outcome,
    Unattended,
    resolve_unattended,
)
from signoff.runtime.refusals import refused_actions
from signoff.runtime.store.port import Change, OutboxItem, TaskStore
from signoff.runtime.tools.base import ToolContext
from signoff.runtime.tools.registry import ToolRegistry
from signoff.runtime.transcript import TranscriptEntry

log = logging.getLogger(__name__)
T = TypeVar("T")
OUTPUT_LIMIT = 4_000
OUTPUT_BYTES = 256 * 1024  # of a whole output's JSON (`_bounded`): a full listing fits


class Judge(Protocol):
    """Smart approval: APPROVE, DENY or ESCALATE for one action."""

    async def judge(self, task: Task, action: Action) -> str:
        """One word."""
        ...


class TaskRunner(Protocol):
    """Works on goals without steps instead of planning them once (the agent loop)."""

    async def run(self, engine: Engine, task: Task) -> Task:
        """Move a claimed task until it waits, completes or fails."""
        ...


@dataclass(frozen=True)
class EngineConfig:
    """The engine's settings (built by the wiring from the config file)."""

    node_id: str = "local"
    approval_timeout: timedelta = timedelta(minutes=30)
    lease: timedelta = timedelta(seconds=60)
    max_retries: int = 1
    scopes: Mapping[RiskClass, tuple[Scope, ...]] = field(default_factory=dict)
    unattended: Unattended = field(default_factory=Unattended)
    forbid_self_approval: bool = False
    people: People = field(default_factory=People)  # who counts as whom ([[people]])
    coalesce: bool = False  # identical pending requests share one card (approvals.coalesce)
    # An action a person denied, asked again unchanged for the same policy_id (outside) or
    # task (agent) within this, is refused at once without a card (0: off).
    remember_deny: timedelta = timedelta(hours=1)
    # How long an always grant lasts unless the answer says ("for"); None: until revoked.
    grant_ttl: timedelta | None = None
    rules: ApprovalRules = field(default_factory=ApprovalRules)  # quorum and hold
    # First approvers of a request (on-call for scheduled runs) and a schedule's own
    # approval timeout; both None outside the daemon.
    approvers_for: Callable[[Task], Sequence[str]] | None = None
    timeout_for: Callable[[Task], timedelta | None] | None = None
    # Each configured schedule's definition by name (`Schedule.definition`): what tells
    # people which of a schedule's Always grants still cover its runs (`grants.status`).
    # None outside the daemon: not known, so no grant is said to be superseded.
    schedule_definitions: Mapping[str, str] | None = None
    # Every node sees the same work dir (daemon.shared_work_dir): a task is not kept on the
    # node that ran its steps.
    shared_work_dir: bool = False

    def scopes_for(self, risk: RiskClass | None) -> list[Scope]:
        """The buttons offered for a risk class (deny is always there)."""
        return list(self.scopes.get(risk or RiskClass.SEND, ALL_SCOPES))


def _short(value: Any) -> Any:
    """``value`` with every string cut to `OUTPUT_LIMIT` characters, inside lists too."""
    text = value if isinstance(value, str) else None
    if text is not None and len(text) > OUTPUT_LIMIT:
        return text[:OUTPUT_LIMIT] + "…"
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


def _bounded(output: Any) -> Any:
    """A tool's output as the task keeps it and the model reads it: strings cut, and the
    whole at most `OUTPUT_BYTES` of JSON. A tool (an MCP server, a plugin) answers with
    whatever it likes; ten thousand short strings are each short and together would be
    megabytes in every later read of the task and in every model turn."""
    short = _short(output)
    whole = json.dumps(short, ensure_ascii=False, default=str)
    if len(whole.encode()) <= OUTPUT_BYTES:
        return short
    return {"output_cut": f"the tool answered with {len(whole.encode()):,} bytes of JSON; "
                          f"its first {OUTPUT_LIMIT:,} characters are kept",
            "text": whole[:OUTPUT_LIMIT] + "…"}


def _error_text(action: Action, exc: ToolError) -> str:
    """A tool's error without its own name in front: the reason says the name once."""
    text = str(exc)
    for prefix in (f"{action.tool} failed: ", f"{action.tool}: ", f"{action.tool} "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _first_run(task: Task) -> bool:
    """True when a claimed task has never run: no step, record, request or agent turn
    yet, and no retry (a task recovered after a crash said it started already)."""
    return (task.state in (TaskState.PLANNING, TaskState.IN_PROGRESS) and task.retries == 0
            and task.step_index == 0 and not task.actions and task.approval is None
            and task.agent is None and task.executing is None)


def _planner_of(task: Task) -> dict[str, Any]:
    """The ``planner`` entry of a task's result, for the final result to keep."""
    found = (task.result or {}).get("planner")
    return {"planner": found} if found else {}


def _fallback_events(task: Task) -> list[AuditEvent]:
    """The audit event of a planner fallback (none when the planner planned itself)."""
    info = _planner_of(task).get("planner") or {}
    if not info.get("fallback"):
        return []
    why = (f"{info.get('kind', 'planner')} planner failed ({info.get('error')}); "
           f"planned by the {info['fallback']} instead")
    return [audit_event("planner_fallback", task, None, reason=why)]


class Engine:
    """Plans, evaluates and executes the actions of tasks."""

    def __init__(self, *, store: TaskStore, registry: ToolRegistry, policy: Policy,
                 planner: Planner, clock: Clock, tool_context: ToolContext,
                 config: EngineConfig = EngineConfig(), judge: Judge | None = None,
                 listener: EngineListener | None = None,
                 runner: TaskRunner | None = None) -> None:
        self.store = store
        self.registry = registry
        self.policy = policy
        self.planner = planner
        self.clock = clock
        self.tool_context = tool_context
        self.config = config
        self.judge = judge
        self.listener: EngineListener = listener or NullListener()
        self.runner = runner  # None: goals without steps are planned once
        self.groups = coalesce.GroupLocks()  # identical requests join one card (coalesce.py)
        self.outages = Outages(clock)  # what /health reports; every loop feeds it

    # -- submission -------------------------------------------------------------------
    def prepare_steps(self, steps: Sequence[Action]) -> list[Action]:
        """Registry-checked actions; an error names the step (``steps[1]: …``)."""
        prepared = []
        for index, step in enumerate(steps):
            try:
                prepared.append(self.registry.prepare(step))
            except ToolError as exc:
                raise BadArguments(f"steps[{index}]: {exc}") from exc
        return prepared

    async def submit(self, goal: str, *, steps: Sequence[Action] | None = None,
                     prohibit: Sequence[str] = (), mode: RunMode = RunMode.INTERACTIVE,
                     schedule: str | None = None, fire_time: Any = None,
                     cron_mode: str | None = None, submitted_by: str | None = None,
                     claim: bool = False, prepared: bool = False,
                     traceparent: str | None = None,
                     schedule_definition: str | None = None) -> Task | None:
        """Store a new task (queued, or claimed by this node); None if the schedule
        already has a task for this fire time. ``prepared``: the steps came from this
        engine's registry's ``prepare`` already (the API checks them so), not again.
        ``schedule_definition``: the digest of the schedule it runs (its Always grants
        belong to it)."""
        now = self.clock.now()
        labelled = None if steps is None else (
            list(steps) if prepared else self.prepare_steps(steps))
        task = Task(id=ids.task_id(), goal=goal, prohibit=list(prohibit), mode=mode,
                    schedule=schedule, fire_time=fire_time, cron_mode=cron_mode,
                    schedule_definition=schedule_definition,
                    submitted_by=submitted_by, created_at=now, updated_at=now,
                    steps=labelled, traceparent=traceparent)
        if claim:
            task.state = TaskState.PLANNING if task.steps is None else TaskState.IN_PROGRESS
            task.claimed_by, task.lease_until = self.config.node_id, now + self.config.lease
        if not await self.store.commit(Change(at=now, task=task, insert=True)):
            return None
        await self.listener.task_event(TaskEvent.QUEUED, task)
        return task

    # -- the main step ------------------------------------------------------------------
    async def advance(self, task: Task) -> Task:
        """Move a claimed task until it waits, completes or fails."""
        try:
            if task.unreadable is not None:
                await self.set_aside(task)
                return task
            if _first_run(task):
                await self.listener.task_event(TaskEvent.STARTED, task)
            if task.agent is not None or (self.runner is not None
                                          and task.state is TaskState.PLANNING):
                if self.runner is None:
                    await self.fail(task, "this node has no agent configured "
                                           "([planner] kind = \"openai\", mode = \"agent\")")
                    return task
                return await self.runner.run(self, task)
            if task.state is TaskState.PLANNING and not await self._plan(task):
                return task
            return await self._run_steps(task)
        except Conflict:
            log.info("task_changed_elsewhere", extra={"task_id": task.id})
            return await self.store.get_task(task.id) or task
        except Exception as exc:  # a bug or a surprise must not crash-loop the task
            return await self._crashed(task, exc)

    async def _crashed(self, task: Task, exc: Exception) -> Task:
        """An exception while planning or running a step: one retry, as after a crash;
        past ``max_retries`` the task fails with the exception as its reason."""
        reason = f"{type(exc).__name__}: {exc}"
        log.exception("task_crashed", extra={"task_id": task.id, "reason": reason})
        stored = await self.store.get_task(task.id)
        if stored is None or stored.claimed_by != self.config.node_id or stored.state not in (
                TaskState.PLANNING, TaskState.IN_PROGRESS):
            return stored or task
        await self._recover_one(stored, why=reason)
        return stored

    async def _plan(self, task: Task) -> bool:
        try:
            plan = await call_planner(self.planner, task.goal, tools=self.registry.schemas())
            self._note_planner(task, plan.planner)
            if not plan.actions:
                raise PlannerError("the planner produced no actions for this goal")
            task.steps = self.prepare_steps(plan.actions)
        except SignoffError as exc:
            if isinstance(exc, PlannerError):
                self._note_planner(task, exc.planner)
            await self.fail(task, f"planning failed: {exc}", audit=_fallback_events(task))
            return False
        task.state = TaskState.IN_PROGRESS
        await self.save(task, audit=_fallback_events(task))
        return True

    @staticmethod
    def _note_planner(task: Task, info: Mapping[str, Any] | None) -> None:
        """Keep how the task was planned in ``result.planner`` (kept to the end)."""
        if info:
            task.result = {**(task.result or {}), "planner": dict(info)}

    async def _run_steps(self, task: Task) -> Task:
        steps = task.steps or []
        if task.pending_action is not None:
            approval = task.approval
            if approval is None or approval.status.value != "approved":
                return task  # still waiting; nothing to do
            who = approval.decided_by or "?"
            decision = f"approved:{approval.scope.value if approval.scope else 'once'}"
            # The decision was audited when it was made; do not audit it twice.
            if not await self._run_gated(task, task.pending_action, decision, who,
                                         audit_kind=None):
                return task
        while task.step_index < len(steps):
            action = steps[task.step_index]
            if not await self._step(task, action):
                return task
        await self.complete(task)
        return task

    async def route(self, task: Task, action: Action) -> Route:
        """The policy's verdict on ``action``, with ASK_USER settled for who can answer;
        ``route.action`` is set when the policy relabelled it (act on that one then)."""
        ev = await self.policy.evaluate(task, action, self.store, now=self.clock.now())
        found = await self._route(task, ev.action or action, ev)
        return found if ev.action is None else replace(found, action=ev.action)

    async def _route(self, task: Task, action: Action, ev: Evaluation) -> Route:
        if ev.verdict is Verdict.BLOCK:
            return Route(RouteKind.BLOCK, actor="auto:policy", reason=ev.reason)
        error = await self.cannot_run(action)
        if error is not None:
            return Route(RouteKind.FAIL, actor="auto:check", reason=error)
        if ev.verdict is Verdict.ALLOW and ev.actor is None:
            return Route(RouteKind.RUN)
        if ev.verdict is Verdict.ALLOW:
            return Route(RouteKind.GATED, "grant", ev.actor or "auto:grant", ev.reason,
                         "evaluation")
        res = resolve_unattended(task, self.config.unattended)
        if res.outcome is Outcome.JUDGE:
            word = await self.judge.judge(task, action) if self.judge else "ESCALATE"
            if word == "APPROVE":  # runs this action only: smart approval never grants
                return Route(RouteKind.GATED, "auto", "auto:smart", "smart approval: APPROVE")
            if word == "DENY":
                return Route(RouteKind.BLOCK, actor="auto:smart", reason="smart approval denied")
            res = resolve_unattended(task.model_copy(update={"mode": RunMode.INTERACTIVE}),
                                     Unattended(mode=ApprovalMode.MANUAL))
        if res.outcome is Outcome.ALLOW:
            return Route(RouteKind.GATED, "auto", res.actor or "auto", res.reason)
        if res.outcome is Outcome.BLOCK:
            return Route(RouteKind.BLOCK, actor=res.actor or "auto:policy", reason=res.reason)
        return Route(RouteKind.ASK, reason=ev.reason)

    async def _step(self, task: Task, action: Action) -> bool:
        """One action: True to go on with the next step, False when the task stopped."""
        route = await self.route(task, action)
        action = route.action or action
        if route.kind is RouteKind.BLOCK:
            await self.block(task, action, route.reason, actor=route.actor or "auto:policy")
            return False
        if route.kind is RouteKind.FAIL:  # failed before anyone is asked
            record, event = self.unrunnable(task, action, route.reason)
            task.actions.append(record)
            await self.fail(task, f"{action.tool} failed: {route.reason}", audit=[event])
            return False
        if route.kind is RouteKind.RUN:
            return await self._run_autonomous(task, action)
        if route.kind is RouteKind.GATED:
            return await self._run_gated(task, action, route.decision, route.actor or "auto",
                                         reason=route.reason or None,
                                         audit_kind=route.audit_kind)
        await self.request_approval(task, action, reason=route.reason)
        return False

    async def cannot_run(self, action: Action) -> str | None:
        """Why ``action`` can never succeed (the registry's check), or None."""
        try:
            await self.registry.check(action, self.tool_context)
        except ToolError as exc:
            return _error_text(action, exc)
        return None

    def unrunnable(self, task: Task, action: Action,
                   error: str) -> tuple[ActionRecord, AuditEvent]:
        """The history record and the audit event of an action that cannot run."""
        record = self.record(task, action, "block", "auto:check", False, None, error)
        return record, audit_event("evaluation", task, action, decision="BLOCK",
                                   actor="auto:check", reason=f"cannot run: {error}")

    async def _run_autonomous(self, task: Task, action: Action) -> bool:
        ok, output, error = await self.execute(action, task)
        task.actions.append(self.record(task, action, "allow", None, ok, output, error))
        if not ok:
            await self.fail(task, f"{action.tool} failed: {error}")
            return False
        task.step_index += 1
        return True

    async def _run_gated(self, task: Task, action: Action, decision: str, actor: str, *,
                         reason: str | None = None, audit_kind: str | None = "decision") -> bool:
        """Run a SEND/DESTRUCTIVE action with its decision audited and a crash marker."""
        events = gated_audit(task, action, Route(RouteKind.GATED, decision, actor, reason or "",
                                                 audit_kind))
        task.executing = action
        task.pending_action = None
        await self.save(task, audit=events)
        if audit_kind is not None:  # nobody was asked: say so before it runs
            await self.announce_auto(task, actor, reason)
        await self._fence(task)
        ok, output, error = await self.execute(action, task)
        task.executing = None
        task.actions.append(self.record(task, action, decision, actor, ok, output, error))
        if not ok:
            await self._recorded(lambda: self.fail(task, f"{action.tool} failed: {error}"))
            return False
        task.step_index += 1
        await self._recorded(lambda: self.save(task))
        return True

    async def announce_auto(self, task: Task, actor: str | None, reason: str | None) -> None:
        """Tell listeners that ``task.executing`` runs approved without a person (a grant,
        cron_mode approve, yolo, smart approval): an ``auto_approved`` event naming why."""
        await self.listener.task_event(TaskEvent.AUTO_APPROVED, task,
                                       auto_words(actor, reason))

    async def _fence(self, task: Task) -> None:
        """Just before an effect: this node must still hold the task's lease.

        A compare-and-set on the lease (`TaskStore.renew_lease`): a node that was frozen
        or cut off long enough for its lease to run out and the task to be recovered by
        another node finds it gone, and runs nothing (`Conflict`: the task is re-read).
        A task that was never claimed (run in place by a one-shot caller) has no lease.
        """
        node = self.config.node_id
        if task.claimed_by != node:
            return
        until = self.clock.now() + self.config.lease
        if not await self._recorded(lambda: self.store.renew_lease(task.id, node, until)):
            log.warning("lease_lost_before_effect", extra={"task_id": task.id})
            raise Conflict(f"task {task.id}: this node no longer holds its lease")
        task.lease_until = until

    async def _recorded(self, write: Callable[[], Awaitable[T]]) -> T:
        """Write around an effect (its fence, its record), waiting out a database outage
        while this node's lease lasts: a write lost to a brief outage would send the
        action back to a person as "outcome unknown". Retrying is safe: each write is a
        compare-and-set (on the task's version, or on its lease), so one that did commit
        before its answer was lost makes the retry a `Conflict` (the task is then re-read)
        or a no-op, never a second write. Past the lease the outcome is left unknown,
        exactly as after a crash."""
        give_up = self.clock.now() + self.config.lease
        backoff = Backoff(first=0.1, maximum=2.0)
        while True:
            try:
                result = await write()
                self.outages.recovered("record")
                return result
            except StoreUnavailable as exc:
                if self.clock.now() >= give_up:
                    raise
                failing("record", exc, self.outages)
                await asyncio.sleep(backoff.next())

    def pinned_to(self, task: Task) -> str | None:
        """The node ``task`` must go on running on when that is not this one, else None:
        its steps used that node's work dir (files written there are not on this disk)."""
        home = task.work_node
        return home if home is not None and home != self.config.node_id else None

    def requeue(self, task: Task) -> None:
        """Put ``task`` back in the queue, claimable only by its `Task.work_node` if set."""
        task.state, task.lease_until = TaskState.QUEUED, None
        task.claimed_by = task.work_node

    # -- the moves: what both runners (steps here, the agent loop) do to a task ----------
    async def execute(self, action: Action, task: Task) -> tuple[bool, Any, str | None]:
        """Run ``action``'s tool for ``task``: (ok, its output shortened, or the error in
        words). The task remembers this node: its effects are on this node's work dir."""
        if not self.config.shared_work_dir and task.work_node is None:
            task.work_node = self.config.node_id
        try:
            output = await self.registry.execute(action, self.tool_context)
            return True, _bounded(output), None
        except ToolError as exc:
            return False, None, _error_text(action, exc)

    def record(self, task: Task, action: Action, decision: str, actor: str | None,
               ok: bool, output: Any, error: str | None) -> ActionRecord:
        """The record of one action that ran (or failed), as the task's history keeps it."""
        return ActionRecord(step=task.step_index, tool=action.tool, args=_short(action.args),
                            risk=action.risk, capability=action.capability,
                            targets=list(action.targets), decision=decision, decided_by=actor,
                            outcome="ok" if ok else "error", output=output, error=error,
                            at=self.clock.now())

    # -- pausing and ending -------------------------------------------------------------
    async def request_approval(self, task: Task, action: Action, *,
                               note: str | None = None, why: str | None = None,
                               transcript: Sequence[TranscriptEntry] = (),
                               reason: str | None = None) -> Approval:
        """Park the task at `waiting_approval` with a new request for ``action``
        (``reason``: why the policy asks, for the audit log)."""
        now = self.clock.now()
        cfg = self.config
        timeout = (cfg.timeout_for(task) if cfg.timeout_for else None) or cfg.approval_timeout
        approvers = list(cfg.approvers_for(task)) if cfg.approvers_for else []
        approval = new_approval(task, action, approval_id=ids.approval_id(), now=now,
                                expires_at=now + timeout, allowed=cfg.scopes_for(action.risk),
                                note=note, approvers=approvers, why=why,
                                needed=cfg.rules.needed(action))
        # A note (a crash) is for this task's card alone: such a request never coalesces.
        grouped = cfg.coalesce and note is None
        async with self.groups.hold(approval) if grouped else contextlib.nullcontext():
            if grouped:
                approval = await coalesce.join(self.store, approval)
            task.state = TaskState.WAITING_APPROVAL
            task.pending_action = action
            task.approval = approval
            task.claimed_by = task.lease_until = None
            event = audit_event("evaluation", task, action, decision="ASK_USER",
                                approval=approval,
                                reason=note or reason or "approval requested")
            # The domain event is written in the same transaction: a crash right after this
            # commit still gets the card posted (the bot layer turns it into card jobs).
            requested = coalesce.card_event(approval, mentions=list(approvers or ()))
            await self.save(task, approval=approval, audit=[event], outbox=[requested],
                             transcript=transcript)
        log.info("approval_requested", extra={"task_id": task.id, "approval_id": approval.id,
                                              "tool": action.tool,
                                              "coalesced_into": approval.coalesced_into})
        await self.listener.approval_requested(task, approval)
        await self.listener.task_event(TaskEvent.WAITING_APPROVAL, task)
        return approval

    async def block(self, task: Task, action: Action, why: str, *, actor: str) -> None:
        """End the task as blocked on ``action`` (recorded, audited as BLOCK)."""
        task.actions.append(ActionRecord(step=task.step_index, tool=action.tool,
                                         args=_short(action.args), risk=action.risk,
                                         capability=action.capability,
                                         targets=list(action.targets), decision="block",
                                         decided_by=actor, outcome="blocked", error=why,
                                         at=self.clock.now()))
        event = audit_event("evaluation", task, action, decision="BLOCK", actor=actor, reason=why)
        await self.fail(task, f"blocked: {why}", audit=[event], kind=TaskEvent.BLOCKED)

    async def complete(self, task: Task, *, answer: str | None = None) -> None:
        """End the task as completed (an agent's final words as ``answer``)."""
        task.state = TaskState.COMPLETED
        task.claimed_by = task.lease_until = None
        outputs = [{"step": r.step, "tool": r.tool, "output": r.output}
                   for r in task.actions if r.outcome == "ok"]
        task.result = {"summary": f"{len(outputs)} action(s) completed", "outputs": outputs,
                       "refused": refused_actions(task.actions), **_planner_of(task)}
        if answer is not None:
            task.result["answer"] = answer
        await self.save(task)
        log.info("task_completed", extra={"task_id": task.id, "actions": len(outputs),
                                          "refused": len(task.result["refused"])})
        await self.listener.task_event(TaskEvent.COMPLETED, task)

    async def fail(self, task: Task, reason: str, *, audit: list[AuditEvent] | None = None,
                    kind: TaskEvent = TaskEvent.FAILED, approval: Approval | None = None,
                    transcript: Sequence[TranscriptEntry] = ()) -> None:
        """End the task as failed with ``reason`` (``kind``: BLOCKED tells that too)."""
        task.state = TaskState.FAILED
        task.pending_action = task.executing = None
        task.claimed_by = task.lease_until = None
        task.result = {"reason": reason, "step": task.step_index, **_planner_of(task)}
        await self.save(task, audit=audit or [], approval=approval, transcript=transcript)
        log.info("task_failed", extra={"task_id": task.id, "reason": reason})
        await self.listener.task_event(kind, task, reason)
        if kind is not TaskEvent.FAILED:
            await self.listener.task_event(TaskEvent.FAILED, task, reason)

    async def save(self, task: Task, *, audit: list[AuditEvent] | None = None,
                    approval: Approval | None = None,
                    outbox: list[OutboxItem] | None = None,
                    transcript: Sequence[TranscriptEntry] = ()) -> None:
        """Commit the task with what goes with it; `Conflict` if someone changed it since."""
        task.updated_at = self.clock.now()
        change = Change(at=task.updated_at, task=task, audit=audit or [], approval=approval,
                        outbox=outbox or [], transcript=list(transcript))
        if not await self.store.commit(change):
            raise Conflict(f"task {task.id} was changed by someone else")

    # -- recovery -------------------------------------------------------------------------
    async def recover(self, *, include_own: bool = True) -> list[Task]:
        """Requeue orphans of a crash; gated actions cut short go back to a person.

        At start-up this node's own claims are orphans of its previous life; later only
        tasks whose lease ran out (another node died) are.
        """
        recovered = []
        owner = self.config.node_id if include_own else None
        for task in await self.store.orphans(owner, self.clock.now()):
            try:
                await self._recover_one(task)
            except Conflict:
                continue
            recovered.append(task)
        return recovered

    async def fail_stranded(self, *, limit: int = 200) -> list[Task]:
        """Fail the queued tasks waiting for a node that is gone: it has not beaten for
        longer than a lease since the task was queued for it. Their files are on that
        node's disk, so no other node can go on with them (`daemon.shared_work_dir`)."""
        now = self.clock.now()
        live = {node.id for node in await self.store.live_nodes(now)} | {self.config.node_id}
        failed = []
        for task in (await self.store.list_tasks(state=TaskState.QUEUED, limit=limit)).items:
            home = task.claimed_by
            if home is None or home in live or task.updated_at + self.config.lease > now:
                continue
            with contextlib.suppress(Conflict):  # its node came back and took it meanwhile
                await self.fail(task, f"node {home}, whose work dir this task used, is gone "
                                      f"(no heartbeat for longer than its lease)")
                failed.append(task)
        return failed

    async def set_aside(self, task: Task) -> None:
        """Fail, for good and with the reason, a task whose stored row cannot be read (a
        stand-in, see `store.readers`): the queue, recovery and listings go on without it."""
        await self.fail(task, task.unreadable or "the stored task cannot be read")

    async def _recover_one(self, task: Task, *, why: str | None = None) -> None:
        """Requeue ``task`` as one retry (a planning task cut short by a crash is no
        retry: it did nothing yet); ``why``: the exception that stopped it, if known."""
        if task.unreadable is not None:
            await self.set_aside(task)
            return
        if task.state is TaskState.PLANNING and why is None:
            self.requeue(task)
            await self.save(task)
            return
        task.retries += 1
        gated = task.executing
        if gated is not None and gated.risk in (RiskClass.SEND, RiskClass.DESTRUCTIVE):
            task.executing = None
            log.warning("gated_action_interrupted", extra={"task_id": task.id})
            await self.request_approval(task, gated, note="outcome unknown after a crash",
                                        why=task.agent.why if task.agent else None)
            return
        task.executing = None
        if task.retries > self.config.max_retries:
            await self.fail(task, "max retries exceeded" if why is None else
                             f"max retries exceeded ({task.retries - 1}); last error: {why}")
            return
        self.requeue(task)
        await self.save(task)
