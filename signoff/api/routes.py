"""The JSON API of the contract: tasks, decisions, approvals, audit, grants, metrics.

Handlers read the store and hand work over; they never run a tool or wait for one.
A submit stores the task and wakes the worker; a decision goes through the approval
flow exactly like a Slack or Telegram click (`ApprovalFlow.on_decision`), whose
compare-and-set makes the first answer win on every surface and node. The routes of
approval requests (any request, and those of agents that are not ours) are in
`signoff.api.approvals`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from signoff._version import __version__
from signoff.api.access import may_read, must_decide, owner_of
from signoff.api.answers import NO_TERMS, Terms, refused_passkey, refused_terms, terms_of
from signoff.api.auth import Identity
from signoff.api.context import ApiContext
from signoff.api.errors import RETRY_AFTER, ApiError, invalid, responses
from signoff.api.intake import FastPost
from signoff.api.metrics import PROMETHEUS_CONTENT_TYPE, MetricsListener
from signoff.api.schemas import (
    ApproveBody,
    AuditList,
    DenyBody,
    GrantList,
    GrantOut,
    HealthOut,
    OncallOut,
    ScheduleList,
    SigningKeyList,
    Submitted,
    TaskList,
    TaskOut,
    TaskSubmit,
    TranscriptList,
)
from signoff.bot.ports import Actor, DecisionEvent
from signoff.errors import StoreError, ToolError
from signoff.runtime.models import (
    Action,
    ApprovalStatus,
    DecisionCode,
    Grant,
    JsonDict,
    RiskClass,
    Scope,
    Task,
    TaskState,
)
from signoff.runtime.policy.grants import status as grant_status
from signoff.runtime.store.port import TaskStore
from signoff.runtime.telemetry import traceparent

KEYS_PATH = "/.well-known/signoff-keys"  # public: what receipts are checked against
CURSOR = r"^[0-9]{1,18}$"  # both stores page by a row sequence number
Limit = Annotated[int, Query(ge=1, le=500, description="Page size")]
Cursor = Annotated[str | None, Query(pattern=CURSOR, description="next_cursor of the "
                                                                  "previous page")]
TaskId = Annotated[str, Path(min_length=1, max_length=100)]
_SUBMITTED = TypeAdapter(Submitted)
CONFLICT_CODES = frozenset({"already_decided", "expired", "not_waiting", "unknown"})


def parts_failing(surfaces: dict[str, str], mcp: dict[str, str] | None,
                  undelivered: int) -> list[str]:
    """What makes a running node "degraded" besides its own loops: a surface not ok
    (disabled at start, or retrying), an MCP server down, cards given up on a surface."""
    found = [f"surface {name}: {state}" for name, state in surfaces.items() if state != "ok"]
    found += [f"mcp server {name}: {state}" for name, state in (mcp or {}).items()
              if state not in ("up", "starting")]
    if undelivered:
        found.append(f"{undelivered} card(s) undelivered")
    return found


CLIENT_HEADER = "X-Signoff-Client"  # "cli": the request comes from the `signoff` command


def surface_of(request: Request) -> str:
    """Where a decision over the API was made, for the audit log's ``channel``: ``cli``
    for the `signoff` command (it says so in `CLIENT_HEADER`), else ``web``. Only a label:
    who decided is the key (``web:<name>``), and both are trusted surfaces alike."""
    return "cli" if request.headers.get(CLIENT_HEADER, "").strip().lower() == "cli" else "web"


def identity_of(request: Request) -> Identity:
    """The caller, as established by `AuthMiddleware`."""
    found = getattr(request.state, "identity", None)
    if not isinstance(found, Identity):
        raise ApiError(401, "missing or invalid API key: send 'Authorization: Bearer <key>'")
    return found


async def grant_public(grant: Grant, store: TaskStore, now: datetime,
                       definitions: Mapping[str, str] | None = None) -> JsonDict:
    """The API's grant shape; ``status`` says ``ended`` for a session grant whose task
    finished, ``lapsed`` past its ``expires_at`` and ``superseded`` for a schedule's
    Always grant that no longer covers its runs, the schedule being defined otherwise
    now or gone from ``definitions`` (the ``live`` field keeps meaning "not revoked, not
    used up")."""
    task = await store.get_task(grant.task_id) if grant.task_id else None
    return {
        "id": grant.id, "key": grant.key, "policy_id": grant.policy_id,
        "task_id": grant.task_id, "scope": grant.scope.value, "tool": grant.tool,
        "capability": grant.capability, "risk": grant.risk.value,
        "fingerprint": grant.fingerprint, "targets": list(grant.targets),
        "max_calls": grant.max_calls, "used": grant.used,
        "live": grant.live, "status": grant_status(grant, task.state if task else None, now,
                                              definitions=definitions),
        "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
        "created_at": grant.created_at.isoformat(),
        "created_by": grant.created_by,
        "revoked_at": grant.revoked_at.isoformat() if grant.revoked_at else None,
        "source": grant.source,
    }


def _waiting(task: Task) -> bool:
    return (task.state is TaskState.WAITING_APPROVAL and task.approval is not None
            and task.approval.status is ApprovalStatus.PENDING)


def conflict(task: Task, detail: str | None = None) -> ApiError:
    """409 with the task's current state."""
    state = task.state.value
    return ApiError(409, detail or f"task {task.id} is {state}, not waiting for approval",
                    state=state)


class TaskApi:
    """The route handlers, bound to one context."""

    def __init__(self, ctx: ApiContext, metrics: MetricsListener) -> None:
        self.ctx = ctx
        self.metrics = metrics

    async def task_or_404(self, task_id: str, request: Request | None = None) -> Task:
        """The task, or a 404 naming it; with ``request``, also 404 when its caller may
        not read it (a requester's view of other callers' tasks is that they do not exist)."""
        task = await self.ctx.store.get_task(task_id)
        if task is None or (request is not None
                            and not may_read(identity_of(request), owner_of(task))):
            raise ApiError(404, f"no task {task_id}")
        return task

    def check_steps(self, body: TaskSubmit) -> list[Action]:
        """Each step's tool and args against the registry, prepared (labelled) as the
        engine would; a 422 names the bad field."""
        registry = self.ctx.engine.registry
        actions = []
        for i, step in enumerate(body.steps or []):
            if step.tool not in registry:
                known = ", ".join(registry.names())
                raise invalid(f"steps[{i}].tool", f"unknown tool {step.tool!r} (known: {known})")
            try:
                actions.append(registry.prepare(Action(tool=step.tool, args=step.args)))
            except ToolError as exc:
                raise invalid(f"steps[{i}].args", str(exc)) from exc
        return actions

    async def submit(self, who: Identity, body: TaskSubmit, headers: Headers) -> Response:
        """POST /tasks: store the task, wake the worker, 202 with its id."""
        steps = self.check_steps(body) if body.steps is not None else None
        prohibit = self.check_prohibit(body.prohibit)
        try:
            # Prepared by check_steps already: once per step is enough (it was 14 % of a
            # POST /tasks of three steps, measured by bench/throughput.py).
            task = await self.ctx.engine.submit(
                body.goal, steps=steps, prohibit=prohibit, submitted_by=who.actor,
                prepared=True, traceparent=traceparent(headers.get("traceparent")))
        except ToolError as exc:  # the registry changed between the check and the submit
            raise invalid("steps", str(exc)) from exc
        if task is None:
            raise ApiError(409, "the task could not be stored", state="missing")
        self.ctx.wake()
        # Serialised straight to bytes as FastAPI would through the response model, but
        # without its per-request validation of our own answer.
        return Response(_SUBMITTED.dump_json(Submitted(id=task.id)), status_code=202,
                        media_type="application/json",
                        headers={"Location": f"/tasks/{task.id}"})

    async def submit_json(self, who: Identity, raw: bytes, headers: Headers) -> Response | None:
        """POST /tasks from the raw JSON body, validated once; None (FastAPI answers, with
        its own words) when it is not a valid `TaskSubmit`."""
        try:
            body = TaskSubmit.model_validate_json(raw)
        except ValidationError:
            return None
        return await self.submit(who, body, headers)

    def check_prohibit(self, entries: list[str]) -> list[str]:
        """Each entry must name a risk class, a tool or a capability (a typo must not
        silently prohibit nothing)."""
        if not entries:
            return []  # the usual case: no need to gather every tool's capability
        registry = self.ctx.engine.registry
        capabilities = {registry.get(name).capability for name in registry.names()}
        risks = {r.value for r in RiskClass}
        for i, entry in enumerate(entries):
            word = entry.strip()
            if word.upper() not in risks and word not in registry and word not in capabilities:
                raise invalid(f"prohibit[{i}]", f"{entry!r} is not a risk class, a tool or a "
                                                "capability")
        return [e.strip() for e in entries]

    async def decide(self, request: Request, task_id: str, scope: Scope,
                     reason: str | None = None, terms: Terms = NO_TERMS,
                     approval_id: str | None = None,
                     passkey: JsonDict | None = None) -> JsonDict:
        """Approve or deny the task's current request through the approval flow;
        ``approval_id``: the request the person saw (409 when the task now waits on
        another one, so an answer never lands on a request nobody looked at)."""
        who = identity_of(request)
        must_decide(who)
        task = await self.task_or_404(task_id, request)
        if not _waiting(task) or task.approval is None:
            raise conflict(task)
        if approval_id is not None and approval_id != task.approval.id:
            raise conflict(task, f"task {task.id} now waits on approval {task.approval.id}, "
                                 f"not {approval_id}: look at the new request first")
        event = DecisionEvent(approval_id=task.approval.id, scope=scope,
                              surface=surface_of(request),
                              actor=Actor("web", who.name), reason=reason,
                              lasts=terms.lasts, args=terms.args, passkey=passkey)
        outcome = await self.ctx.flow.on_decision(event)
        current = await self.ctx.store.get_task(task_id) or task
        if outcome.accepted:
            return current.public()
        refused_passkey(outcome, task.approval.id, scope)
        refused_terms(outcome)
        if outcome.code is DecisionCode.NOT_AUTHORIZED:
            raise ApiError(403, outcome.message)
        if outcome.code is DecisionCode.SCOPE_NOT_ALLOWED:
            raise invalid("scope", outcome.message)
        raise conflict(current, outcome.message)


def build_router(ctx: ApiContext, metrics: MetricsListener,
                 fast: dict[str, FastPost] | None = None) -> APIRouter:
    """All JSON routes; ``fast`` receives the intake route's `FastPost` (see
    `signoff.api.intake`)."""
    api = TaskApi(ctx, metrics)
    router = APIRouter()

    # Every JSON route declares its `response_model`, so FastAPI validates what a handler
    # returns against the documented schema (a mismatch is a 500, not a silent drift) and
    # serialises it through that model. Where an optional key is left out of the shape
    # rather than sent as null (/health "mcp", a transcript item's "tool_calls"),
    # `response_model_exclude_unset` keeps it out; explicit nulls are still sent.
    @router.get("/health", response_model=HealthOut, response_model_exclude_unset=True,
                tags=["daemon"])
    async def health() -> JsonDict | Response:
        """Liveness, what is wrong (``problems``), the live nodes sharing this database, and
        how each chat surface and MCP server is doing; never needs a key. 503 with
        ``"status": "down"`` while the database is unavailable or cannot write."""
        surfaces = ctx.surfaces() if ctx.surfaces is not None else {}
        outages = ctx.engine.outages
        try:
            nodes = [n.public() for n in await ctx.store.live_nodes(ctx.clock.now())]
            undelivered = [{"approval_id": c.approval_id, "surface": c.surface,
                            "error": c.error, "since": c.since.isoformat()}
                           for c in await ctx.flow.failover.undelivered()]
        except StoreError as exc:
            outages.database_failed(exc)
            nodes, undelivered = [], []
        mcp = ctx.mcp_status() if ctx.mcp_status is not None else None
        problems = [*outages.problems(), *parts_failing(surfaces, mcp, len(undelivered))]
        status = outages.status()
        body: dict[str, Any] = {"status": "degraded" if status == "ok" and problems else status,
                                "problems": problems, "version": __version__,
                                "node": ctx.engine.config.node_id, "nodes": nodes,
                                "surfaces": surfaces, "undelivered": undelivered}
        if mcp is not None:
            body["mcp"] = mcp
        if body["status"] == "down":
            return JSONResponse(HealthOut(**body).model_dump(exclude_unset=True),
                                status_code=503, headers={"Retry-After": RETRY_AFTER})
        return body

    @router.get("/tasks", response_model=TaskList, responses=responses(401, 422),
                tags=["tasks"])
    async def list_tasks(request: Request, state: TaskState | None = None, limit: Limit = 50,
                         cursor: Cursor = None) -> JsonDict:
        """Tasks, newest first, one page at a time (a requester key sees only its own; a
        page may then hold fewer than ``limit`` while ``next_cursor`` goes on)."""
        who = identity_of(request)
        page = await ctx.store.list_tasks(state=state, limit=limit, cursor=cursor)
        items = [t.public() for t in page.items if may_read(who, owner_of(t))]
        return {"items": items, "next_cursor": page.next_cursor}

    @router.post("/tasks", status_code=202, tags=["tasks"], response_model=Submitted,
                 responses=responses(401, 403, 413, 422))
    async def submit(request: Request, body: TaskSubmit) -> Response:
        """Store a task and return its id at once; the worker does the rest."""
        return await api.submit(identity_of(request), body, request.headers)

    if fast is not None:  # the same handler, for a well-formed request (signoff.api.intake)
        fast["/tasks"] = api.submit_json


    @router.get("/tasks/{task_id}", tags=["tasks"], response_model=TaskOut,
                responses={303: {"description": "A browser is sent to the console's task "
                                                "page"}, **responses(401, 404, 422)})
    async def get_task(request: Request, task_id: TaskId) -> JsonDict | Response:
        """One task (a browser asking for HTML is sent to the console page instead)."""
        task = await api.task_or_404(task_id, request)
        accept = request.headers.get("accept", "")
        if "text/html" in accept and "application/json" not in accept:
            return RedirectResponse(f"/console/tasks/{task.id}", status_code=303)
        return task.public()

    @router.get("/tasks/{task_id}/transcript", tags=["tasks"],
                response_model=TranscriptList, response_model_exclude_unset=True,
                responses=responses(401, 404, 422))
    async def transcript(request: Request, task_id: TaskId, limit: Limit = 100,
                         cursor: Cursor = None) -> JsonDict:
        """An agent task's conversation, oldest first (empty for a task with fixed steps)."""
        await api.task_or_404(task_id, request)
        page = await ctx.store.transcript(task_id, after=int(cursor) if cursor else -1,
                                          limit=limit)
        items = [e.public() for e in page.items]
        return {"items": items, "next_cursor": page.next_cursor}

    @router.post("/tasks/{task_id}/approve", tags=["decisions"],
                 response_model=TaskOut, responses=responses(401, 403, 404, 409, 413, 422))
    async def approve(request: Request, task_id: TaskId,
                      body: Annotated[ApproveBody | None, Body()] = None) -> JsonDict:
        """Approve the pending action: once, for this session, or always; ``for`` time-boxes
        the grant, edited ``args`` run instead of the asked ones."""
        scope, terms = terms_of(body)
        return await api.decide(request, task_id, scope, terms=terms,
                                approval_id=body.approval_id if body is not None else None,
                                passkey=body.passkey if body is not None else None)

    @router.post("/tasks/{task_id}/deny", tags=["decisions"],
                 response_model=TaskOut, responses=responses(401, 403, 404, 409, 413, 422))
    async def deny(request: Request, task_id: TaskId,
                   body: Annotated[DenyBody | None, Body()] = None) -> JsonDict:
        """Deny the pending action: the task fails with "user denied[: reason]" (an agent
        with on_deny = "tell_model" is told so and goes on)."""
        reason = ((body.reason or "").strip() or None) if body is not None else None
        return await api.decide(request, task_id, Scope.DENY, reason,
                                approval_id=body.approval_id if body is not None else None,
                                passkey=body.passkey if body is not None else None)

    @router.get("/audit", tags=["audit"],
                response_model=AuditList, responses=responses(401, 422))
    async def audit(task: Annotated[str | None, Query(max_length=100)] = None,
                    limit: Limit = 50, cursor: Cursor = None) -> JsonDict:
        """Audit events in chain order, optionally of one task."""
        page = await ctx.store.audit_events(task_id=task, limit=limit, cursor=cursor)
        items = [ev.public() for ev in page.items]
        return {"items": items, "next_cursor": page.next_cursor}

    @router.get(KEYS_PATH, tags=["audit"], response_model=SigningKeyList)
    async def signing_keys() -> JsonDict:
        """Every node's public signing key (Ed25519, base64url), retired ones included:
        what a signed receipt is checked against. Never needs a key."""
        return {"keys": [k.public() for k in await ctx.store.signing_keys()]}

    @router.get("/grants", tags=["grants"],
                response_model=GrantList, responses=responses(401, 422))
    async def grants(include_revoked: bool = False) -> JsonDict:
        """Remembered decisions (session and always grants)."""
        found = await ctx.store.list_grants(include_revoked=include_revoked)
        now, definitions = ctx.engine.clock.now(), ctx.engine.config.schedule_definitions
        items = [await grant_public(g, ctx.store, now, definitions) for g in found]
        return {"items": items, "next_cursor": None}

    @router.delete("/grants/{grant_id}", tags=["grants"],
                   response_model=GrantOut, responses=responses(401, 403, 404, 422))
    async def revoke(request: Request,
                     grant_id: Annotated[str, Path(min_length=1, max_length=100)]) -> JsonDict:
        """Revoke a grant (audited); revoking twice changes nothing."""
        who = identity_of(request)
        grant = await ctx.store.get_grant(grant_id)
        if grant is None:
            raise ApiError(404, f"no grant {grant_id}")
        if grant.revoked_at is None:
            grant = await ctx.decider.revoke_grant(grant_id, who.actor) or grant
        return await grant_public(grant, ctx.store, ctx.engine.clock.now(),
                                  ctx.engine.config.schedule_definitions)

    @router.get("/schedules", tags=["daemon"],
                response_model=ScheduleList, responses=responses(401))
    async def schedules() -> JsonDict:
        """Configured schedules and their next runs."""
        items = await ctx.schedules() if ctx.schedules is not None else []
        return {"items": items, "next_cursor": None}

    @router.get("/oncall", tags=["daemon"],
                response_model=OncallOut, responses=responses(401, 422))
    async def oncall(at: datetime | None = None) -> JsonDict:
        """Who is on call now (or at ``at``)."""
        if ctx.oncall is not None:
            return await ctx.oncall(at)
        when = at or ctx.clock.now()
        return {"at": when.isoformat(), "on_call": [], "rotations": []}

    @router.get("/metrics", tags=["daemon"], response_class=PlainTextResponse,
                responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                                 "description": "Prometheus text format"}, **responses(401)})
    async def prometheus() -> Response:
        """Prometheus metrics."""
        body = await metrics.render(ctx.store, ctx.clock.now())
        return Response(body, media_type=PROMETHEUS_CONTENT_TYPE)

    return router
