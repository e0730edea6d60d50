"""The approval routes: requests from agents that are not ours, and decisions on any request.

    POST /v1/approvals                  ask about one action (Idempotency-Key honoured,
                                        bound to the request it was first used for)
    GET  /v1/approvals/{id}?wait=30s    its status; long-polls until decided (≤ MAX_WAIT)
    POST /v1/approvals/{id}/outcome     what the caller did (once; audited as ``outcome``)
    DELETE /v1/approvals/{id}           withdraw a pending request (its requester or admin)
    GET  /approvals?status=pending      pending requests of tasks and from outside
    POST /approvals/{id}/approve|deny   decide any request, like a click on its card
    POST /approvals/batch               once or deny for several requests, one result each
    POST /approvals/{id}/undo           deny a held request within its undo window

Under a quorum a partial approval answers 200 with ``"status": "pending"`` and the count
(``"approvals": 1, "needed": 2``). With a hold the approval that decides answers
``"status": "held"`` with ``hold_until``; a long poll (``?wait=``) keeps waiting through
the hold and answers only "approved" (released) or "denied" (undone).

A decision goes through `ApprovalFlow.on_decision`, exactly like a Slack or Telegram
click, so authorization, exactly-once and the audit are the same on every path. A long
poll parks on the decider's `ApprovalWatch` (woken by the commit of a decision on this
node) and re-reads the store every second or so for decisions taken on other nodes.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Request
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import Headers
from starlette.responses import Response

from signoff.api.access import may_read, may_report, may_withdraw, must_decide, owner_of
from signoff.api.answers import NO_TERMS, Terms, refused_passkey, refused_terms, terms_of
from signoff.api.auth import Identity
from signoff.api.batch import decide_all
from signoff.api.context import ApiContext
from signoff.api.errors import ApiError, duration_field, invalid, responses
from signoff.api.intake import FastPost
from signoff.api.routes import identity_of, surface_of
from signoff.api.schemas import (
    ApprovalList,
    ApproveBody,
    BatchIn,
    BatchOut,
    DenyBody,
    OutcomeIn,
    RequestIn,
    RequestPendingOut,
    RequestSettledOut,
    RequestStatusOut,
    WithdrawnOut,
)
from signoff.bot.ports import Actor, DecisionEvent
from signoff.errors import ToolError
from signoff.runtime.models import Approval, ApprovalStatus, JsonDict, RiskClass, Scope
from signoff.runtime.outside import KeyReused, OutcomeConflict, OutsideRequests, RequestSpec
from signoff.runtime.refusals import reported_words
from signoff.runtime.store.port import PendingRequest
from signoff.runtime.telemetry import traceparent

MAX_WAIT = 60.0  # seconds a long poll may hold a connection; longer waits are shortened
# The scope key under which signoff.api.longpoll hands the route the request a local
# decision just committed (None: read it), so a woken waiter does not read it back.
WOKEN_BY = "signoff.woken_by"
MIN_TIMEOUT = 1.0
CURSOR = r"^[0-9]{1,18}$"
KEY = r"^[\x21-\x7e]{1,255}$"  # printable ASCII, no spaces
ApprovalId = Annotated[str, Path(min_length=1, max_length=100)]
Limit = Annotated[int, Query(ge=1, le=500, description="Page size")]
Cursor = Annotated[str | None, Query(pattern=CURSOR, description="next_cursor of the "
                                                                  "previous page")]
WAIT_TEXT = r"^[0-9][0-9.]*(ms|s|m)?$"
WAIT_PATTERN = re.compile(WAIT_TEXT)  # and at most 20 characters, like Wait
Wait = Annotated[str | None, Query(
    max_length=20, pattern=WAIT_TEXT,
    description=f'Long-poll: answer once decided or after this long ("30s", "1m", "500ms"; '
                f"at most {MAX_WAIT:.0f} s, longer waits are shortened)")]


# What POST /v1/approvals answers. `submitted` builds the member itself, so validation
# never has to guess which one a dict is (their fields overlap).
Submission = RequestPendingOut | RequestSettledOut | RequestStatusOut
_SUBMISSION: TypeAdapter[Submission] = TypeAdapter(Submission)
_IDEMPOTENCY_KEY = re.compile(KEY)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def request_status(approval: Approval) -> JsonDict:
    """The status shape of any request (GET /v1/approvals/{id})."""
    return {
        "id": approval.id, "status": approval.status.value,
        "scope": approval.scope.value if approval.scope else None,
        "decided_by": approval.decided_by, "decided_at": _iso(approval.decided_at),
        "reason": approval.reason, "expires_at": approval.expires_at.isoformat(),
        "task_id": approval.task_id, "policy_id": approval.policy_id,
        "decision": approval.verdict.value if approval.verdict else None,
        "outcome": approval.outcome, "reported": reported_words(approval),
        "approvals": approvals_counted(approval), "needed": approval.needed,
        "hold_until": _iso(approval.hold_until),
        # Approved with edited args: the caller runs these (or nothing), never its own.
        "edited": approval.original_action is not None,
        "args": approval.action.args if approval.original_action is not None else None,
    }


def approvals_counted(approval: Approval) -> int:
    """People's approvals of a request: its quorum votes, or the one person who approved
    it alone (an automatic approval is nobody's)."""
    if approval.votes:
        return len(approval.votes)
    approved = approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.HELD)
    by_person = bool(approval.decided_by) and not str(approval.decided_by).startswith("auto")
    return int(approved and by_person)


def submitted(approval: Approval, *, replayed: bool) -> Response:
    """202 while a person decides; 200 when the policy settled it (or, for a replayed key,
    a person has decided since: then its current status). Serialised straight to bytes,
    as FastAPI would through the `Submission` model."""
    headers = {"Location": f"/v1/approvals/{approval.id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    answer: Submission
    if approval.status is ApprovalStatus.PENDING:
        answer = RequestPendingOut(id=approval.id, status="pending",
                                   expires_at=approval.expires_at.isoformat())
    elif approval.verdict is not None and approval.verdict.value in ("ALLOW", "BLOCK"):
        answer = RequestSettledOut.model_validate(
            {"id": approval.id, "status": approval.status.value,
             "decision": approval.verdict.value, "reason": approval.reason})
    else:
        answer = RequestStatusOut.model_validate(request_status(approval))
    return Response(_SUBMISSION.dump_json(answer), media_type="application/json",
                    status_code=202 if approval.status is ApprovalStatus.PENDING else 200,
                    headers=headers)


def request_item(item: PendingRequest) -> JsonDict:
    """One pending request with what a person needs to decide it (GET /approvals)."""
    approval, task = item.approval, item.task
    action = (task.pending_action if task is not None else None) or approval.action
    return {
        **approval.public(),
        "task_id": approval.task_id,
        "goal": task.goal if task is not None else (approval.goal or ""),
        "schedule": task.schedule if task is not None else None,
        "submitted_by": task.submitted_by if task is not None else approval.submitted_by,
        "step": approval.step,
        "allowed_scopes": [s.value for s in approval.allowed_scopes],
        "action": action.public(), "note": approval.note,
        "requester": approval.requester, "policy_id": approval.policy_id,
        "why": approval.why, "coalesced_into": approval.coalesced_into,
        "approvals": approvals_counted(approval), "needed": approval.needed,
        "hold_until": _iso(approval.hold_until),
    }


def wait_seconds(text: str | None) -> float:
    """The long-poll wait, capped at MAX_WAIT (0 without ``wait``)."""
    if text is None:
        return 0.0
    return min(duration_field("wait", text).total_seconds(), MAX_WAIT)


def spec_of(body: RequestIn, *, actor: str, key: str | None,
            trace: str | None = None) -> RequestSpec:
    """The runtime's view of a request body; a 422 names a bad field."""
    timeout = None
    if body.timeout is not None:
        timeout = duration_field("timeout", body.timeout)
        if timeout.total_seconds() < MIN_TIMEOUT:
            raise invalid("timeout", f"must be at least {MIN_TIMEOUT:.0f} s")
    for field, values in (("targets", body.targets), ("content", body.content)):
        for i, value in enumerate(values):
            if not value.strip() or len(value) > 1_000:
                raise invalid(f"{field}[{i}]", "must be a non-empty string of at most 1000 "
                                               "characters")
    return RequestSpec(
        tool=body.tool, args=body.args, policy_id=body.policy_id, requester=body.requester,
        risk=RiskClass(body.risk) if body.risk else None, capability=body.capability,
        targets=tuple(body.targets), content=tuple(body.content), goal=body.goal,
        why=body.why, timeout=timeout, editable=body.editable, definition=body.definition,
        description=body.description,
        # Keys are the caller's own namespace: two API keys never share a request.
        idempotency_key=f"{actor} {key}" if key else None, submitted_by=actor,
        traceparent=traceparent(trace))


def build_router(ctx: ApiContext, fast: dict[str, FastPost] | None = None) -> APIRouter:
    """The approval routes (see the module docstring); ``fast`` receives the intake
    route's `FastPost` (see `signoff.api.intake`)."""
    desk = OutsideRequests(engine=ctx.engine)
    watch = ctx.decider.watch
    router = APIRouter()

    async def readable(request: Request, approval: Approval | None) -> bool:
        if approval is None:
            return False
        who = identity_of(request)
        if may_read(who, approval.submitted_by):
            return True
        task = await ctx.store.get_task(approval.task_id) if approval.task_id else None
        return may_read(who, owner_of(approval, task))

    async def approval_or_404(approval_id: str, request: Request) -> Approval:
        """The request, or 404 when unknown or not the caller's to read."""
        approval = await ctx.store.get_approval(approval_id)
        if approval is None or not await readable(request, approval):
            raise ApiError(404, f"no approval request {approval_id}")
        return approval

    async def decide(request: Request, approval_id: str, scope: Scope,
                     reason: str | None, terms: Terms = NO_TERMS,
                     seen: str | None = None, passkey: JsonDict | None = None) -> JsonDict:
        who = identity_of(request)
        must_decide(who)
        approval = await approval_or_404(approval_id, request)
        if seen is not None and seen != approval_id:  # 409s carry the state (ConflictOut)
            raise ApiError(409, f"approval_id {seen} in the body is not {approval_id}",
                           state=approval.status.value)
        # An assertion is checked before the request's state: a replay is a 403 even
        # once the request it was made for is decided.
        if approval.status is not ApprovalStatus.PENDING and passkey is None:
            raise ApiError(409, f"request {approval.id} is already {approval.status.value}",
                           state=approval.status.value)
        event = DecisionEvent(approval_id=approval.id, scope=scope,
                              surface=surface_of(request), actor=Actor("web", who.name),
                              reason=reason,
                              lasts=terms.lasts, args=terms.args, passkey=passkey)
        outcome = await ctx.flow.on_decision(event)
        current = await ctx.store.get_approval(approval.id) or approval
        if outcome.accepted:
            return request_status(current)
        refused_passkey(outcome, approval.id, scope)
        refused_terms(outcome)
        if outcome.code == "not_authorized":
            raise ApiError(403, outcome.message)
        if outcome.code == "scope_not_allowed":
            raise invalid("scope", outcome.message)
        raise ApiError(409, outcome.message, state=current.status.value)

    async def undo(request: Request, approval_id: str) -> JsonDict:
        who = identity_of(request)
        must_decide(who)
        approval = await approval_or_404(approval_id, request)
        event = DecisionEvent(approval_id=approval.id, scope=Scope.DENY,
                              surface=surface_of(request), actor=Actor("web", who.name),
                              undo=True)
        outcome = await ctx.flow.on_decision(event)
        current = await ctx.store.get_approval(approval.id) or approval
        if outcome.accepted:
            return request_status(current)
        if outcome.code == "not_authorized":
            raise ApiError(403, outcome.message)
        raise ApiError(409, outcome.message, state=current.status.value)

    @router.post("/v1/approvals", tags=["approvals"], status_code=202,
                 response_model=Submission,
                 responses={200: {"model": RequestSettledOut | RequestStatusOut,
                                  "description": "Settled by the policy (ALLOW or BLOCK); "
                                                 "a replayed key of a request decided since "
                                                 "gives its status"},
                            202: {"model": RequestPendingOut,
                                  "description": "A person decides; poll GET /v1/approvals/"
                                                 "{id}?wait=30s"},
                            **responses(401, 403, 409, 413, 422)})
    async def create(request: Request, body: RequestIn,
                     idempotency_key: Annotated[str | None, Header(
                         pattern=KEY, description="The same key returns the same request "
                                                  "(retries are safe); a key used before for "
                                                  "a different request is 422")] = None
                     ) -> Response:
        """Ask signoff about one action of an agent that is not ours."""
        return await ask(identity_of(request), body, idempotency_key,
                         request.headers.get("traceparent"))

    async def ask(who: Identity, body: RequestIn, idempotency_key: str | None,
                  trace: str | None) -> Response:
        spec = spec_of(body, actor=who.actor, key=idempotency_key, trace=trace)
        try:
            approval, replayed = await desk.submit(spec)
        except ToolError as exc:
            raise invalid("args", str(exc)) from exc
        except KeyReused as exc:
            message = "was used for a different request"
            raise ApiError(422, f"Idempotency-Key {idempotency_key} {message}",
                           errors=[{"field": "Idempotency-Key", "message": message}]) from exc
        return submitted(approval, replayed=replayed)

    async def ask_json(who: Identity, raw: bytes, headers: Headers) -> Response | None:
        """POST /v1/approvals from the raw JSON body, validated once; None (FastAPI
        answers, in its own words) for an invalid body or Idempotency-Key."""
        key = headers.get("idempotency-key")
        if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
            return None
        try:
            body = RequestIn.model_validate_json(raw)
        except ValidationError:
            return None
        return await ask(who, body, key, headers.get("traceparent"))

    if fast is not None:
        fast["/v1/approvals"] = ask_json

    @router.get("/v1/approvals/{approval_id}", tags=["approvals"],
                response_model=RequestStatusOut, responses=responses(401, 404, 422))
    async def status(request: Request, approval_id: ApprovalId, wait: Wait = None) -> JsonDict:
        """A request's status; with ``wait``, answers as soon as it is decided."""
        seconds = wait_seconds(wait)

        given = request.scope.get(WOKEN_BY)

        # One read per look, authorized as it is read (no second read to check first).
        async def look(woken_by: Approval | None) -> tuple[Approval, bool]:
            committed = woken_by or given
            if committed is None or committed.id != approval_id:
                approval = await approval_or_404(approval_id, request)
            elif await readable(request, committed):  # never answer another caller's
                approval = committed
            else:
                raise ApiError(404, f"no approval request {approval_id}")
            # A held request is approved but may still be undone: wait for its end.
            return approval, approval.status.final

        if seconds <= 0:  # one look, no wait: nothing to register with the watch
            return request_status((await look(None))[0])
        return request_status(await watch.wait_until(approval_id, look, seconds))

    @router.post("/v1/approvals/{approval_id}/outcome", tags=["approvals"],
                 response_model=RequestStatusOut,
                 responses=responses(401, 403, 404, 409, 413, 422))
    async def outcome(request: Request, approval_id: ApprovalId,
                      body: OutcomeIn) -> JsonDict:
        """Record what the caller did with a decided request (once)."""
        who = identity_of(request)
        approval = await approval_or_404(approval_id, request)
        if not may_report(who, owner_of(approval)):
            raise ApiError(403, f"request {approval.id} was asked by another key; only it "
                                "or an admin key may report what was done")
        try:
            updated = await desk.report_outcome(approval, ok=body.ok, detail=body.detail,
                                                actor=who.actor)
        except OutcomeConflict as exc:
            current = await ctx.store.get_approval(approval_id) or approval
            raise ApiError(409, str(exc), state=current.status.value) from exc
        return request_status(updated)

    @router.delete("/v1/approvals/{approval_id}", tags=["approvals"],
                   response_model=WithdrawnOut, responses=responses(401, 403, 404, 409, 422))
    async def withdraw(request: Request, approval_id: ApprovalId) -> JsonDict:
        """Withdraw a pending request (the caller stopped waiting): its cards say
        "Withdrawn by …" and any later decision is refused (409)."""
        who = identity_of(request)
        approval = await approval_or_404(approval_id, request)
        if not may_withdraw(who, owner_of(approval)):
            raise ApiError(403, f"request {approval.id} was asked by another key; only it "
                                "or an admin key may withdraw it")
        if approval.task_id is not None:
            raise ApiError(409, f"request {approval.id} belongs to task {approval.task_id}; "
                                "deny it instead", state=approval.status.value)
        if approval.status is ApprovalStatus.PENDING:
            done = await ctx.decider.withdraw(approval, who.actor)
            if done is not None:
                return {"id": done.id, "status": done.status.value}
        current = await ctx.store.get_approval(approval.id) or approval
        raise ApiError(409, f"request {approval.id} is already {current.status.value}",
                       state=current.status.value)

    @router.get("/approvals", tags=["decisions"],
                response_model=ApprovalList, responses=responses(401, 422))
    async def pending(request: Request, status: Literal["pending"] = "pending",
                      limit: Limit = 50, cursor: Cursor = None) -> JsonDict:
        """Pending requests of tasks and from outside, oldest first (a requester key sees
        only its own)."""
        who = identity_of(request)
        page = await ctx.store.pending_requests(limit=limit, cursor=cursor)
        items = [request_item(i) for i in page.items if isinstance(i, PendingRequest)
                 and may_read(who, owner_of(i.approval, i.task))]
        return {"items": items, "next_cursor": page.next_cursor}

    @router.post("/approvals/batch", tags=["decisions"], response_model=BatchOut,
                 responses=responses(401, 413, 422))
    async def batch(request: Request, body: BatchIn) -> BatchOut:
        """Approve once, or deny, several requests; each id gets the status its own route
        would give (200, 403, 404, 409). Session and always are refused (422): a batch
        never creates a grant wider than one action."""
        actor = Actor("web", identity_of(request).name)
        scope = Scope.ONCE if body.decision == "once" else Scope.DENY
        reason = (body.reason or "").strip() or None if scope is Scope.DENY else None
        return BatchOut(results=await decide_all(ctx, ctx.flow.on_decision, actor, body.ids,
                                                 scope, reason))

    @router.post("/approvals/{approval_id}/approve", tags=["decisions"],
                 response_model=RequestStatusOut,
                 responses=responses(401, 403, 404, 409, 413, 422))
    async def approve(request: Request, approval_id: ApprovalId,
                      body: Annotated[ApproveBody | None, Body()] = None) -> JsonDict:
        """Approve any pending request (of a task or from outside); ``for`` time-boxes the
        grant; edited ``args`` (a task's request only) run instead of the asked ones."""
        scope, terms = terms_of(body)
        return await decide(request, approval_id, scope, None, terms,
                            seen=body.approval_id if body is not None else None,
                            passkey=body.passkey if body is not None else None)

    @router.post("/approvals/{approval_id}/deny", tags=["decisions"],
                 response_model=RequestStatusOut,
                 responses=responses(401, 403, 404, 409, 413, 422))
    async def deny(request: Request, approval_id: ApprovalId,
                   body: Annotated[DenyBody | None, Body()] = None) -> JsonDict:
        """Deny any pending request."""
        reason = ((body.reason or "").strip() or None) if body is not None else None
        return await decide(request, approval_id, Scope.DENY, reason,
                            seen=body.approval_id if body is not None else None,
                            passkey=body.passkey if body is not None else None)

    @router.post("/approvals/{approval_id}/undo", tags=["decisions"],
                 response_model=RequestStatusOut,
                 responses=responses(401, 403, 404, 409, 422))
    async def undo_route(request: Request, approval_id: ApprovalId) -> JsonDict:
        """Undo a held approval within its window (it is denied, "undone by …"); 409 once
        the window is over or when the request was not held."""
        return await undo(request, approval_id)

    return router
