"""Request and response bodies of the HTTP API, separate from the stored models.

Requests are validated here (a 422 names the field). Responses are built by the
runtime's ``public()`` methods, which are the contract; the response models below
describe those shapes for ``/openapi.json`` and for schemathesis, and are not used to
filter what is sent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_STEPS = 100


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------- requests
class StepIn(_Body):
    """One explicit step: a tool and its arguments (risk comes from the registry)."""

    tool: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)


class TaskSubmit(_Body):
    """POST /tasks."""

    goal: str = Field(min_length=1, max_length=10_000)
    steps: list[StepIn] | None = Field(default=None, min_length=1, max_length=MAX_STEPS)
    prohibit: list[str] = Field(default_factory=list, max_length=100)
    schedule: None = None  # scheduled goals come from the config file, never from a request


class ApproveBody(_Body):
    """POST /tasks/{id}/approve."""

    scope: Literal["once", "session", "always"] = "once"


class DenyBody(_Body):
    """POST /tasks/{id}/deny."""

    reason: str | None = Field(default=None, max_length=1_000)


# ------------------------------------------------------------------ responses
class ErrorOut(BaseModel):
    """Any error: a one-line ``detail``."""

    detail: str


class FieldError(BaseModel):
    """One bad input field."""

    field: str
    message: str


class ValidationOut(BaseModel):
    """422: ``detail`` names the field(s); ``errors`` lists them one by one."""

    detail: str
    errors: list[FieldError]


class ConflictOut(BaseModel):
    """409: the task is not waiting for this decision; ``state`` is where it is now."""

    detail: str
    state: str


class Submitted(BaseModel):
    """202 from POST /tasks."""

    id: str


class HealthOut(BaseModel):
    """GET /health."""

    status: str
    version: str
    node: str
    surfaces: dict[str, str]  # "ok", "degraded: <why>" (retrying) or "disabled: <why>"
    mcp: dict[str, str] | None = None  # per MCP server: "up", "starting" or "down: <why>"


class PendingActionOut(BaseModel):
    """The action a task waits on."""

    tool: str
    args: dict[str, Any]
    risk: str | None
    capability: str | None
    targets: list[str]


class ApprovalOut(BaseModel):
    """A task's current approval request."""

    id: str
    status: str
    requested_at: str
    expires_at: str


class ActionRecordOut(BaseModel):
    """One executed or refused action with its decision and outcome."""

    step: int
    tool: str
    args: dict[str, Any]
    risk: str | None
    capability: str | None
    targets: list[str]
    decision: str
    decided_by: str | None
    outcome: str
    output: Any = None
    error: str | None
    at: str


class TaskOut(BaseModel):
    """The contract's task shape (``result`` is an object, never a JSON string)."""

    id: str
    state: str
    goal: str
    result: dict[str, Any] | None
    pending_action: PendingActionOut | None
    approval: ApprovalOut | None
    actions: list[ActionRecordOut]
    retries: int
    schedule: str | None
    created_at: str
    updated_at: str


class TaskList(BaseModel):
    """GET /tasks."""

    items: list[TaskOut]
    next_cursor: str | None


class PendingApprovalOut(BaseModel):
    """One pending request across tasks (GET /approvals)."""

    id: str
    status: str
    requested_at: str
    expires_at: str
    task_id: str
    goal: str
    schedule: str | None
    submitted_by: str | None
    step: int
    allowed_scopes: list[str]
    action: PendingActionOut
    note: str | None


class ApprovalList(BaseModel):
    """GET /approvals."""

    items: list[PendingApprovalOut]
    next_cursor: str | None


class AuditEventOut(BaseModel):
    """One hash-chained audit event."""

    id: int
    at: str
    task_id: str | None
    approval_id: str | None
    kind: str
    decision: str | None
    scope: str | None
    actor: str | None
    tool: str | None
    targets: list[str]
    risk: str | None
    fingerprint: str | None
    reason: str | None
    channel: str | None
    latency_ms: float | None
    prev_hash: str
    hash: str


class AuditList(BaseModel):
    """GET /audit."""

    items: list[AuditEventOut]
    next_cursor: str | None


class GrantOut(BaseModel):
    """A remembered decision covering one exact action fingerprint."""

    id: str
    key: str
    policy_id: str
    task_id: str | None
    scope: str
    tool: str
    capability: str
    risk: str
    fingerprint: str
    max_calls: int | None
    used: int
    live: bool
    created_at: str
    created_by: str | None
    revoked_at: str | None
    source: str


class GrantList(BaseModel):
    """GET /grants."""

    items: list[GrantOut]
    next_cursor: str | None


class ScheduleList(BaseModel):
    """GET /schedules (filled by the scheduler when there is one)."""

    items: list[dict[str, Any]]
    next_cursor: str | None


class OncallOut(BaseModel):
    """GET /oncall: who is on call (a free-form object from the rotations)."""

    model_config = ConfigDict(extra="allow")
