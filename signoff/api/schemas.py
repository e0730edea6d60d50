"""Request and response bodies of the HTTP API, separate from the stored models.

Requests are validated here (a 422 names the field). Responses are built by the
runtime's ``public()`` methods, which are the contract; the response models below are
each route's ``response_model``: FastAPI validates every answer against them and
serialises it through them, so ``/openapi.json`` (and schemathesis) describes exactly
what is sent. A key a model lacks would be dropped, so a model must name every key.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from signoff.runtime.text import mask
from signoff.runtime.tools.base import DESCRIPTION_MAX

MAX_STEPS = 100

# Answers show URLs as people see them on cards: user info and query values as •••
# (`runtime.text.mask`). Applied here, on the way out, so stored data, fingerprints and
# grants keep the real value; AuditEventOut alone is unmasked (the audit log is the record).
MaskedStr = Annotated[str, AfterValidator(mask)]
MaskedJson = Annotated[dict[str, Any], AfterValidator(mask)]
MaskedAny = Annotated[Any, AfterValidator(mask)]


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


APPROVAL_ID_DOC = ("The approval request the person saw: if the task now waits on another "
                   "one, nothing is decided (409)")


PASSKEY_MAX = 32 * 1024  # bytes of one WebAuthn credential's JSON (a few hundred in practice)
PASSKEY_DOC = ("Passkey step-up: a WebAuthn assertion in its JSON form "
               "(PublicKeyCredential.toJSON()), made with the options of GET /approvals/{id}/"
               "passkey-options for this decision")


def _bounded_credential(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A WebAuthn credential no larger than PASSKEY_MAX bytes of JSON."""
    if value is not None and len(json.dumps(value, default=str)) > PASSKEY_MAX:
        raise ValueError(f"larger than {PASSKEY_MAX} bytes")
    return value


class ApproveBody(_Body):
    """POST /tasks/{id}/approve and POST /approvals/{id}/approve.

    ``for`` time-boxes a session or always grant ("30m", "8h", "7d"); ``args`` approves
    these edited args instead of the ones asked (a task's request only).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    scope: Literal["once", "session", "always"] = "once"
    lasts: str | None = Field(default=None, alias="for", max_length=40,
                              description='The grant lapses after this long ("30m", "8h", '
                                          '"7d"); session or always only')
    args: dict[str, Any] | None = Field(default=None, description="Edited args to approve "
                                        "instead of the asked ones (a task's request only)")
    approval_id: str | None = Field(default=None, min_length=1, max_length=100,
                                    description=APPROVAL_ID_DOC)
    passkey: dict[str, Any] | None = Field(default=None, description=PASSKEY_DOC)

    _passkey = field_validator("passkey")(_bounded_credential)


class DenyBody(_Body):
    """POST /tasks/{id}/deny."""

    reason: str | None = Field(default=None, max_length=1_000)
    approval_id: str | None = Field(default=None, min_length=1, max_length=100,
                                    description=APPROVAL_ID_DOC)
    passkey: dict[str, Any] | None = Field(default=None, description=PASSKEY_DOC)

    _passkey = field_validator("passkey")(_bounded_credential)


class PasskeyRegisterIn(_Body):
    """POST /passkeys/register: a name for the passkey and the new credential."""

    name: str = Field(min_length=1, max_length=100, description='What the person calls it '
                                                                 '("laptop", "phone")')
    credential: dict[str, Any] = Field(description="The new credential in its JSON form "
                                                   "(PublicKeyCredential.toJSON()), made with "
                                                   "the options of POST /passkeys/register/"
                                                   "options")

    _credential = field_validator("credential")(_bounded_credential)


class PasskeyOut(BaseModel):
    """One registered passkey (its public key is not shown)."""

    id: str
    name: str
    owner: str
    credential_id: str
    created_at: str
    revoked_at: str | None = None


class PasskeyList(BaseModel):
    """GET /passkeys: the caller's passkeys (an admin's: everyone's), revoked ones too."""

    items: list[PasskeyOut]


class BatchIn(_Body):
    """POST /approvals/batch: one answer for several requests — once or deny only, so a
    batch never creates a session or always grant."""

    ids: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        min_length=1, max_length=500)
    decision: Literal["once", "deny"]
    reason: str | None = Field(default=None, max_length=1_000)


class BatchResultOut(BaseModel):
    """What happened to one request of a batch, as its own route would have answered."""

    id: str
    status: Literal[200, 403, 404, 409]
    detail: str


class BatchOut(BaseModel):
    """POST /approvals/batch: one result per id, in the order given."""

    results: list[BatchResultOut]


RISKS = Literal["READ", "DRAFT", "SEND", "DESTRUCTIVE"]
LABEL = r"^[^\x00-\x1f\x7f]+$"  # one line: no control characters
# Text of several lines: no control characters but tab and line breaks.
DESCRIPTION_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+$"


class RequestIn(_Body):
    """POST /v1/approvals: an agent that is not ours asks about one action."""

    tool: str = Field(min_length=1, max_length=200, pattern=LABEL)
    args: dict[str, Any] = Field(default_factory=dict)
    risk: RISKS | None = None
    capability: str | None = Field(default=None, min_length=1, max_length=200, pattern=LABEL)
    targets: list[str] = Field(default_factory=list, max_length=50)
    content: list[str] = Field(default_factory=list, max_length=50)
    requester: str = Field(min_length=1, max_length=200, pattern=LABEL)
    policy_id: str = Field(min_length=1, max_length=200, pattern=LABEL)
    goal: str | None = Field(default=None, max_length=10_000)
    why: str | None = Field(default=None, max_length=2_000)
    timeout: str | None = Field(default=None, max_length=40,
                                description='How long a person has to answer, e.g. "10m" '
                                            "(default approvals.timeout, at most 7 days)")
    editable: bool = Field(default=False,
                           description="The caller runs edited args it is sent back (an "
                                       "approver may then approve with edited args); "
                                       "otherwise an edit is refused")
    definition: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$",
        description="A digest of the tool's definition as the agent was shown it (an MCP "
                    "tool's description, input schema and annotations): session and always "
                    "answers cover that definition only, so a tool redefined since asks "
                    "again")
    description: str | None = Field(
        default=None, min_length=1, max_length=DESCRIPTION_MAX, pattern=DESCRIPTION_TEXT,
        description="What the tool says it does, as the agent was shown it (an MCP tool's "
                    "description as its server lists it): shown on the card, attributed to "
                    "the tool's server and shortened, as plain text; it changes neither "
                    "the fingerprint nor the idempotency of the request")


class OutcomeIn(_Body):
    """POST /v1/approvals/{id}/outcome: what the caller did with the decision."""

    ok: bool
    detail: str | None = Field(default=None, max_length=2_000)


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
    """409: the task or request is not waiting for this; ``state`` is where it is now."""

    detail: str
    state: str


class Submitted(BaseModel):
    """202 from POST /tasks."""

    id: str


class NodeOut(BaseModel):
    """A live node in the registry (times are that node's own clock)."""

    id: str
    host: str
    started_at: str
    last_beat: str
    running: int


class UndeliveredOut(BaseModel):
    """A card the outbox gave up posting on one surface, while its request is pending."""

    approval_id: str
    surface: str
    error: MaskedStr
    since: str


class HealthOut(BaseModel):
    """GET /health."""

    status: str  # "ok", "degraded" (a loop or service failing) or "down" (the database)
    problems: list[str] = []  # what is wrong now, the database first
    version: str
    node: str
    nodes: list[NodeOut]
    surfaces: dict[str, str]  # "ok", "degraded: <why>" (retrying) or "disabled: <why>"
    mcp: dict[str, str] | None = None  # per MCP server: "up", "starting" or "down: <why>"
    undelivered: list[UndeliveredOut] = []  # cards given up on a surface (announced elsewhere)


class PendingActionOut(BaseModel):
    """The action a task waits on."""

    tool: str
    args: MaskedJson
    risk: str | None
    capability: str | None
    targets: list[MaskedStr]


class ApprovalOut(BaseModel):
    """A task's current approval request."""

    id: str
    status: str  # "held" during an undo window (approvals.hold)
    requested_at: str
    expires_at: str


class ActionRecordOut(BaseModel):
    """One executed or refused action with its decision and outcome."""

    step: int
    tool: str
    args: MaskedJson
    risk: str | None
    capability: str | None
    targets: list[MaskedStr]
    decision: str
    decided_by: str | None
    outcome: str
    output: MaskedAny = None
    error: MaskedStr | None
    at: str


class TaskOut(BaseModel):
    """The contract's task shape (``result`` is an object, never a JSON string)."""

    id: str
    state: str
    goal: MaskedStr
    result: MaskedJson | None
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
    """One pending request, of a task or from outside (GET /approvals); ``task_id`` is
    null for outside requests, which carry ``requester`` and ``policy_id``."""

    id: str
    status: str
    requested_at: str
    expires_at: str
    task_id: str | None
    goal: MaskedStr
    schedule: str | None
    submitted_by: str | None
    step: int
    allowed_scopes: list[str]
    action: PendingActionOut
    note: MaskedStr | None
    why: MaskedStr | None = None  # the proposer's own words: our agent's, or the requester's
    requester: MaskedStr | None
    policy_id: str | None
    # Quorum and hold (see [policy.quorum], approvals.hold): approvals counted so far, how
    # many are needed, and until when an approved request waits ("held", undoable).
    approvals: int = 0
    needed: int = 1
    hold_until: str | None = None
    # Coalescing: the request whose card this one shares (its answer decides this one
    # too); null when the request has its own card.
    coalesced_into: str | None = None


class RequestSettledOut(BaseModel):
    """200 from POST /v1/approvals: the policy settled the request at once."""

    id: str
    status: Literal["approved", "denied"]
    decision: Literal["ALLOW", "BLOCK"]
    reason: MaskedStr | None


class RequestPendingOut(BaseModel):
    """202 from POST /v1/approvals: a person decides; cards are on every surface."""

    id: str
    status: Literal["pending"]
    expires_at: str


class RequestStatusOut(BaseModel):
    """GET /v1/approvals/{id}, and the answer of POST /approvals/{id}/approve|deny."""

    id: str
    status: Literal["pending", "held", "approved", "denied", "expired", "withdrawn"]
    scope: str | None
    decided_by: str | None
    decided_at: str | None
    reason: MaskedStr | None
    expires_at: str
    task_id: str | None
    policy_id: str | None
    decision: str | None
    outcome: MaskedJson | None
    # An approved outside request: "outcome not reported by the caller" until it reports.
    reported: MaskedStr | None = None
    # Quorum and hold (see [policy.quorum], approvals.hold): approvals counted so far, how
    # many are needed, and until when an approved request waits ("held", undoable).
    approvals: int = 0
    needed: int = 1
    hold_until: str | None = None
    # Approved with edited args (console or API): the caller runs ``args``, which replace
    # the ones it asked about; null when nothing was edited. Not masked: they are what
    # runs, and a masked URL would run as "•••".
    edited: bool = False
    args: dict[str, Any] | None = None


class WithdrawnOut(BaseModel):
    """DELETE /v1/approvals/{id}: the request was taken back before anyone answered."""

    id: str
    status: Literal["withdrawn"]


class ApprovalList(BaseModel):
    """GET /approvals."""

    items: list[PendingApprovalOut]
    next_cursor: str | None


class TranscriptItemOut(BaseModel):
    """One message of an agent task's conversation (tool outputs shortened)."""

    role: str
    content: MaskedStr | None
    tool_calls: list[MaskedJson] | None = None
    tool_call_id: str | None = None
    at: str | None


class TranscriptList(BaseModel):
    """GET /tasks/{id}/transcript, oldest first."""

    items: list[TranscriptItemOut]
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
    original_fingerprint: str | None = Field(
        default=None, description="A decision on edited args: the asked action's fingerprint "
                                  "(``fingerprint`` is the edited one's)")
    passkey: dict[str, Any] | None = Field(
        default=None, description="A decision confirmed with a passkey: the assertion "
                                  "(credential_id, authenticator_data, client_data_json, "
                                  "signature, user_handle; base64url) and what its challenge "
                                  "was derived from (decision, nonce, rp_id)")
    reason: str | None
    channel: str | None
    latency_ms: float | None
    prev_hash: str
    hash: str
    kid: str | None = Field(default=None, description="The signing key's id (see "
                                                      "/.well-known/signoff-keys)")
    sig: str | None = Field(default=None, description="Ed25519 signature (base64url) over "
                                                      "the event's hash")


class AuditList(BaseModel):
    """GET /audit."""

    items: list[AuditEventOut]
    next_cursor: str | None


class SigningKeyOut(BaseModel):
    """A node's public signing key, as a JWK (OKP, Ed25519) with signoff's extras."""

    kid: str
    kty: str
    crv: str
    alg: str
    x: str = Field(description="The public key, base64url")
    node: str
    created_at: str
    retired_at: str | None
    status: str = Field(description="active, or retired (still verifies what it signed)")


class SigningKeyList(BaseModel):
    """GET /.well-known/signoff-keys."""

    keys: list[SigningKeyOut]


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
    targets: list[MaskedStr]
    max_calls: int | None
    used: int
    live: bool
    status: Literal["live", "revoked", "used", "ended", "lapsed", "superseded"] = Field(
        description="superseded: a schedule's always grant that no longer covers its runs "
                    "(the schedule's goal or steps changed, or it was removed)")
    expires_at: str | None = Field(description="When it lapses (null: never)")
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

    items: list[MaskedJson]
    next_cursor: str | None


class OncallOut(BaseModel):
    """GET /oncall: who is on call (a free-form object from the rotations)."""

    model_config = ConfigDict(extra="allow")
