"""The runtime's values: tasks, actions, approvals, grants and audit events.

Everything here is plain data (pydantic models and string Enums) so that the store, the
HTTP API and the chat adapters can share it without importing each other.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from signoff.runtime.clock import system_now

JsonDict = dict[str, Any]


def utcnow() -> datetime:  # wall clock: a default for values built outside any node
    """An aware UTC default for values built outside a node (tests, fixtures, scripts).

    The engine never relies on it: it passes its Clock's time into every value it makes,
    and the store stamps audit events with the time of the change that holds them.
    """
    return system_now()


class RiskClass(enum.StrEnum):
    """How much harm an action can do; the autonomy boundary."""

    READ = "READ"
    DRAFT = "DRAFT"
    SEND = "SEND"
    DESTRUCTIVE = "DESTRUCTIVE"

    @property
    def rank(self) -> int:
        """Order of severity: READ < DRAFT < SEND < DESTRUCTIVE."""
        return _RISK_ORDER.index(self)

    @classmethod
    def parse(cls, value: str) -> RiskClass:
        """Accept any case ("send", "SEND")."""
        try:
            return cls(value.strip().upper())
        except ValueError:
            names = ", ".join(r.value for r in cls)
            raise ValueError(f"unknown risk class {value!r} (expected one of {names})") from None


_RISK_ORDER = [RiskClass.READ, RiskClass.DRAFT, RiskClass.SEND, RiskClass.DESTRUCTIVE]


def _risk(value: object) -> object:
    return RiskClass.parse(value) if isinstance(value, str) else value


Risk = Annotated[RiskClass, BeforeValidator(_risk)]
"""A risk class as a config file names it, in any case ("send", "SEND")."""


class DecisionCode(enum.StrEnum):
    """Why an answer was accepted or refused (what the person who answered is told)."""

    OK = "ok"
    UNKNOWN = "unknown"
    ALREADY_DECIDED = "already_decided"
    EXPIRED = "expired"
    SCOPE_NOT_ALLOWED = "scope_not_allowed"
    NOT_WAITING = "not_waiting"
    NOT_AUTHORIZED = "not_authorized"
    ERROR = "error"  # the surface could not hand the answer over
    INVALID = "invalid"  # the answer itself is malformed (a bad "for", bad edited args)
    BLOCKED = "blocked"  # edited args the policy would block: nothing was decided
    STEP_UP = "step_up"  # this risk class is decided in the console, not from a chat
    PARTIAL = "partial"  # an approval counted towards a quorum; more are needed
    ALREADY_COUNTED = "already_counted"  # the same person approved this request before
    NOT_HELD = "not_held"  # undo of a request that is not (or no longer) in its hold
    PASSKEY = "passkey"  # passkey step-up: no, or no acceptable, passkey assertion


class TaskState(enum.StrEnum):
    """The task lifecycle of the contract."""

    QUEUED = "queued"
    PLANNING = "planning"
    IN_PROGRESS = "in_progress"
    WAITING_APPROVAL = "waiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        """True for the two terminal states."""
        return self in (TaskState.COMPLETED, TaskState.FAILED)


class Verdict(enum.StrEnum):
    """What the policy says about one action."""

    ALLOW = "ALLOW"
    ASK_USER = "ASK_USER"
    BLOCK = "BLOCK"


class Scope(enum.StrEnum):
    """A person's answer to an approval request."""

    ONCE = "once"
    SESSION = "session"
    ALWAYS = "always"
    DENY = "deny"

    @property
    def approves(self) -> bool:
        """True for once, session and always."""
        return self is not Scope.DENY


ALL_SCOPES: tuple[Scope, ...] = (Scope.ONCE, Scope.SESSION, Scope.ALWAYS, Scope.DENY)


class ApprovalStatus(enum.StrEnum):
    """Where an approval request stands."""

    PENDING = "pending"
    HELD = "held"  # approved, waiting out its undo window (`Approval.hold_until`)
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"  # the outside agent that asked took it back before an answer

    @property
    def open(self) -> bool:
        """True while a decision can still be made."""
        return self is ApprovalStatus.PENDING

    @property
    def final(self) -> bool:
        """True once nothing can change it any more (a held approval can still be undone)."""
        return self not in (ApprovalStatus.PENDING, ApprovalStatus.HELD)


class RunMode(enum.StrEnum):
    """Who can answer when the policy asks: decides how ASK_USER is resolved."""

    INTERACTIVE = "interactive"  # submitted to the daemon: ask on every surface
    SCHEDULED = "scheduled"  # fired by a schedule: follow cron_mode
    TERMINAL = "terminal"  # `signoff handle` with a person at the prompt
    NON_INTERACTIVE = "non_interactive"  # `signoff handle` with nobody there: fail closed
    YOLO = "yolo"  # `signoff handle --yolo`


class Action(BaseModel):
    """One step of a plan: a tool call. The registry fills risk, capability, targets."""

    model_config = ConfigDict(frozen=True)

    tool: str
    args: JsonDict = Field(default_factory=dict)
    risk: RiskClass | None = None
    capability: str | None = None
    targets: tuple[str, ...] = ()
    fingerprint: str | None = None
    summary: str | None = None  # the tool's own words for this call (set by the registry)
    content: tuple[str, ...] = ()  # which args are message content (shown, never granted)
    # Set by the policy: a network destination on a private network, asked about as such
    # (the run may connect there; see signoff.runtime.policy.net).
    private_network: bool = False
    # An outside request's digest of its tool's definition (`outside.RequestSpec`), kept
    # so an edit is bound to it as the request was.
    definition: str | None = None
    # What the tool says it does, as its server lists it (an MCP tool's description; an
    # outside request's ``description``): the server's claim, shown on the card, never in
    # a fingerprint, a grant or an idempotency digest (``definition`` binds those).
    description: str | None = None

    def public(self) -> JsonDict:
        """The contract's `pending_action` shape."""
        return {
            "tool": self.tool,
            "args": self.args,
            "risk": self.risk.value if self.risk else None,
            "capability": self.capability,
            "targets": list(self.targets),
        }


class ActionRecord(BaseModel):
    """One executed or refused action in a task's history."""

    step: int
    tool: str
    args: JsonDict = Field(default_factory=dict)
    risk: RiskClass | None = None
    capability: str | None = None
    targets: list[str] = Field(default_factory=list)
    decision: str  # ALLOW / ASK_USER / BLOCK, then the scope or automatic rule
    decided_by: str | None = None
    outcome: str  # ok, error, denied, blocked, timed_out, unknown
    output: Any = None
    error: str | None = None
    at: datetime = Field(default_factory=utcnow)


class Vote(BaseModel):
    """One person's approval of a request that needs several (a quorum)."""

    actor: str
    scope: Scope
    at: datetime
    channel: str | None = None
    # The time box this approver gave their session or always answer (None: none).
    lasts: timedelta | None = None


class Approval(BaseModel):
    """One request for a person's decision on one exact action.

    A task's request has ``task_id``; a request from an agent that is not ours (POST
    /v1/approvals) has none and says who asks (``requester``), why, and under which
    ``policy_id`` its session and always grants live. Both kinds go through the same
    policy, decisions, cards, expiry and audit.
    """

    id: str
    task_id: str | None = None
    status: ApprovalStatus = ApprovalStatus.PENDING
    action: Action
    step: int = 0
    allowed_scopes: list[Scope] = Field(default_factory=lambda: list(ALL_SCOPES))
    requested_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    scope: Scope | None = None
    reason: str | None = None
    note: str | None = None  # e.g. "outcome unknown after a crash"
    # The proposer's own words: our agent's (the model's turn that proposed the call) or,
    # for an outside request, the requester's reason.
    why: str | None = None
    approvers: list[str] = Field(default_factory=list)  # extra deciders (on-call, escalation)
    escalation_level: int = 0
    escalated_at: datetime | None = None
    # Where grants from this request live (the task's policy_id, or the request's own).
    policy_id: str | None = None
    submitted_by: str | None = None  # who asked (an actor key), for the self-approval rule
    # Outside requests only (task_id None):
    requester: str | None = None  # the agent's own label, e.g. "hermes:alice@laptop"
    # The caller's W3C traceparent (its task's, for an agent task): telemetry links the
    # request's spans to the caller's trace, whichever node decides it, however late.
    traceparent: str | None = None
    goal: str | None = None
    verdict: Verdict | None = None  # the policy's answer when the request came in
    idempotency_key: str | None = None
    # What the key is bound to (`outside.request_digest`): a replay must ask the same.
    request_digest: str | None = None
    # The secret its audit events commit to the action's args with (`audit.commit_args`):
    # a receipt proves which args were approved to whoever is shown them and this key,
    # and to nobody else. Never in an API answer; None for requests made before 0.3.
    args_key: str | None = None
    outcome: JsonDict | None = None  # what the caller reported it did: {"ok", "detail", ...}
    # Coalescing (`signoff.runtime.coalesce`): the group of identical requests this one
    # belongs to, and the request whose card it shares (None: it has its own card).
    coalesce_key: str | None = None
    coalesced_into: str | None = None
    # Approved with edited args: ``action`` is then the edited action, this the one asked.
    original_action: Action | None = None
    # An outside request whose caller runs edited args it is sent back ("editable": true);
    # any other outside request cannot be edited (its caller would run the original).
    editable: bool = False
    # A held approval's grant is made on release; its time box ("for") waits here.
    grant_lasts: timedelta | None = None
    # Quorum: how many distinct people must approve (fixed when the request is made) and
    # the approvals counted so far; the one that reaches ``needed`` decides.
    needed: int = 1
    votes: list[Vote] = Field(default_factory=list)
    # Hold: an approved request waits until then (status HELD) and can still be undone.
    hold_until: datetime | None = None
    # Why its stored row could not be read (a stand-in, see `store.readers`); else None.
    unreadable: str | None = None

    @property
    def outside(self) -> bool:
        """True for a request from an agent that is not ours (no task)."""
        return self.task_id is None

    def public(self) -> JsonDict:
        """The contract's `approval` shape."""
        return {
            "id": self.id,
            "status": self.status.value,
            "requested_at": self.requested_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
        }


class OnDeny(enum.StrEnum):
    """What an agent task does when one of its calls is denied, timed out or blocked."""

    TELL_MODEL = "tell_model"  # the refusal becomes the call's tool result; the model goes on
    FAIL = "fail"  # the task fails, as a fixed plan does


class AgentState(BaseModel):
    """What an agent task keeps in its row; the conversation itself is its transcript.

    The limits are copied from the config when the task starts, so a running task keeps
    the rules it started with.
    """

    model: str = ""
    max_turns: int = 20
    max_actions: int = 50
    on_deny: OnDeny = OnDeny.TELL_MODEL
    call_id: str | None = None  # the tool call the pending (or executing) action answers
    why: str | None = None  # the model's words from the turn that proposed that call
    synced: int = -1  # last transcript seq whose action record is in `Task.actions`

    @property
    def tells_model(self) -> bool:
        """True when a refusal goes back to the model instead of failing the task."""
        return self.on_deny is OnDeny.TELL_MODEL


class Task(BaseModel):
    """A goal being worked on, with its plan, history and pending decision."""

    id: str
    state: TaskState = TaskState.QUEUED
    goal: str
    steps: list[Action] | None = None  # None until planned; explicit steps skip the planner
    step_index: int = 0
    pending_action: Action | None = None
    approval: Approval | None = None
    actions: list[ActionRecord] = Field(default_factory=list)
    result: JsonDict | None = None
    retries: int = 0
    schedule: str | None = None
    # A scheduled run: the digest of its schedule's definition when it was queued
    # (`Schedule.definition`). Its Always grants belong to that definition and cover
    # only runs of the same one (`policy.grants.covers`). None: not fired by the
    # scheduler (or queued before 0.3).
    schedule_definition: str | None = None
    fire_time: datetime | None = None
    cron_mode: str | None = None  # resolved cron_mode for scheduled tasks
    prohibit: list[str] = Field(default_factory=list)
    submitted_by: str | None = None
    traceparent: str | None = None  # the submitter's W3C traceparent (telemetry)
    mode: RunMode = RunMode.INTERACTIVE
    executing: Action | None = None  # set while a gated action runs (crash marker)
    agent: AgentState | None = None  # set while (and after) an agent works on the goal
    # A claimed task: the node holding it. A queued one: the only node that may claim it
    # (its `work_node`), or None for any node.
    claimed_by: str | None = None
    lease_until: datetime | None = None
    # The node whose work dir the task's steps used (None: none ran yet, or the work dir is
    # shared): it alone goes on with the task (`Engine.pinned_to`).
    work_node: str | None = None
    version: int = 0
    # Why its stored row could not be read (a stand-in, see `store.readers`); else None.
    unreadable: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def policy_id(self) -> str:
        """Where `always` grants live: the schedule's name, else this task."""
        return self.schedule or self.id

    def public(self) -> JsonDict:
        """The contract's task shape."""
        return {
            "id": self.id,
            "state": self.state.value,
            "goal": self.goal,
            "result": self.result,
            "pending_action": self.pending_action.public() if self.pending_action else None,
            "approval": self.approval.public() if self.approval else None,
            "actions": [a.model_dump(mode="json") for a in self.actions],
            "retries": self.retries,
            "schedule": self.schedule,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


class Grant(BaseModel):
    """Authority for exactly one action fingerprint."""

    id: str
    key: str  # signoff:<policy_id>:<sha256(tool, capability, rule, fingerprint)>
    policy_id: str
    task_id: str | None = None
    scope: Scope
    tool: str
    capability: str
    risk: RiskClass
    fingerprint: str
    targets: list[str] = Field(default_factory=list)  # what it covers, for people
    max_calls: int | None = None  # 1 for once; None for session/always
    used: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    created_by: str | None = None
    revoked_at: datetime | None = None
    source: str = "decision"  # decision | schedule
    # Made in a scheduled run: its schedule's definition (`Task.schedule_definition`). An
    # Always grant covers later runs of that schedule only while it is defined the same.
    schedule_definition: str | None = None
    # When it lapses (an answer's "for", or approvals.grant_ttl for always); None: never.
    # Whether it still covers at a given time is `policy.grants.covers`, not this model's.
    expires_at: datetime | None = None

    @property
    def live(self) -> bool:
        """Not revoked and not used up."""
        if self.revoked_at is not None:
            return False
        return self.max_calls is None or self.used < self.max_calls


class AuditEvent(BaseModel):
    """One decision, hash-chained to the one before it."""

    id: int = 0
    at: datetime = Field(default_factory=utcnow)
    task_id: str | None = None
    approval_id: str | None = None
    kind: str  # evaluation, decision, refused, expired, grant_revoked, ...
    decision: str | None = None
    scope: str | None = None
    actor: str | None = None
    tool: str | None = None
    targets: list[str] = Field(default_factory=list)
    risk: str | None = None
    fingerprint: str | None = None
    reason: str | None = None
    channel: str | None = None
    latency_ms: float | None = None
    # A decision on edited args: ``fingerprint`` is the edited action's, this the one asked.
    original_fingerprint: str | None = None
    # A decision confirmed with a passkey (approvals.step_up_with = "passkey"): the
    # assertion as signed (base64url: credential_id, authenticator_data, client_data_json,
    # signature, user_handle) and what its challenge was derived from (decision, nonce,
    # rp_id); `signoff.runtime.passkeys.reverify` checks it again.
    passkey: JsonDict | None = None
    # HMAC-SHA256 of the action's args (canonical JSON) under its approval's ``args_key``:
    # the content a person approved, pinned without being disclosed (`audit.commit_args`).
    args_digest: str | None = None
    prev_hash: str = ""
    hash: str = ""
    # The node's Ed25519 signature over ``hash`` (`signoff.runtime.signing`); not hashed.
    kid: str | None = None
    sig: str | None = None

    def public(self) -> JsonDict:
        """The contract's audit event shape (plus channel and latency)."""
        return self.model_dump(mode="json")
