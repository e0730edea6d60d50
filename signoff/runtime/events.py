"""What the engine tells the layers above it: the listener port and the audit helper.

The bot layer implements `EngineListener` (post cards, notify channels); the runtime
never imports it. Listeners are called after the state change is committed, so a
listener that fails loses nothing: the flow re-syncs cards from the store on start.
"""

from __future__ import annotations

import enum
from typing import Protocol

from signoff.runtime.audit import commit_args
from signoff.runtime.models import Action, Approval, AuditEvent, JsonDict, Task
from signoff.runtime.store.port import OutboxItem


class ApprovalEvent(enum.StrEnum):
    """A durable domain event about one approval request.

    Written to the outbox in the same transaction as the state it reports, so that a crash
    right after the commit loses no card: the bot layer turns each into its card jobs on
    every surface (the runtime knows no cards).
    """

    REQUESTED = "approval_requested"  # payload: mentions (the on-call asked first)
    DECIDED = "approval_decided"  # approved, held, released, undone, denied or expired
    VOTED = "approval_voted"  # one approval counted towards a quorum (still pending)
    ESCALATED = "approval_escalated"  # payload: level, mentions (new), approvers, waited
    GROUPED = "approval_grouped"  # an identical request joined or left this card
    REMINDED = "approval_reminded"  # payload: title, left, mentions (everyone asked now)


def approval_event(kind: ApprovalEvent, approval_id: str, *, suffix: str = "",
                   **payload: object) -> OutboxItem:
    """The outbox row of one domain event ("*": for every surface); its key makes it
    idempotent (``suffix`` tells apart repeated events of one kind, e.g. each escalation)."""
    data: JsonDict = {"approval_id": approval_id, **payload}
    return OutboxItem(key=f"{kind.value}:{approval_id}{suffix}", surface="*", kind=kind.value,
                      payload=data, approval_id=approval_id)


class TaskEvent(enum.StrEnum):
    """What happened to a task, as listeners (team channels, metrics) hear it."""

    QUEUED = "queued"
    STARTED = "started"  # a worker began running it (once, not again after a decision)
    AUTO_APPROVED = "auto_approved"  # a gated action ran without a person (detail: why)
    WAITING_APPROVAL = "waiting_approval"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    ESCALATED = "escalated"
    SKIPPED = "skipped"


class EngineListener(Protocol):
    """Receives committed events. Implementations must not raise.

    ``task`` is None for a request from an agent that is not ours (no task behind it).
    """

    async def approval_requested(self, task: Task | None, approval: Approval) -> None:
        """A request was created (and its task, if any, waits for it)."""
        ...

    async def approval_decided(self, task: Task | None, approval: Approval) -> None:
        """A request was approved, denied or expired."""
        ...

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """See `TaskEvent` (and `[[notify]]` in INTERFACE.md)."""
        ...


class NullListener:
    """Listens to nothing."""

    async def approval_requested(self, task: Task | None, approval: Approval) -> None:
        """Ignore."""

    async def approval_decided(self, task: Task | None, approval: Approval) -> None:
        """Ignore."""

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """Ignore."""


def audit_event(kind: str, task: Task | None, action: Action | None, *,
                decision: str | None = None, actor: str | None = None, scope: str | None = None,
                reason: str | None = None, approval: Approval | None = None,
                channel: str | None = None, latency_ms: float | None = None) -> AuditEvent:
    """An unsealed audit event about one action of a task (or of an outside request)."""
    task_id = task.id if task is not None and task.id else None
    if task_id is None and approval is not None:
        task_id = approval.task_id
    committed = (commit_args(approval.args_key, action.args)
                 if approval is not None and approval.args_key and action is not None
                 else None)
    return AuditEvent(
        task_id=task_id, approval_id=approval.id if approval else None, kind=kind,
        args_digest=committed,
        decision=decision, scope=scope, actor=actor,
        tool=action.tool if action else None,
        targets=list(action.targets) if action else [],
        risk=action.risk.value if action and action.risk else None,
        fingerprint=action.fingerprint if action else None, reason=reason, channel=channel,
        latency_ms=latency_ms)


class MultiListener:
    """Fans every event out to several listeners (flow, metrics, …), in order."""

    def __init__(self, *listeners: EngineListener) -> None:
        self.listeners = list(listeners)

    def add(self, listener: EngineListener) -> None:
        """Listen too."""
        self.listeners.append(listener)

    async def approval_requested(self, task: Task | None, approval: Approval) -> None:
        """Tell everyone."""
        for listener in self.listeners:
            await listener.approval_requested(task, approval)

    async def approval_decided(self, task: Task | None, approval: Approval) -> None:
        """Tell everyone."""
        for listener in self.listeners:
            await listener.approval_decided(task, approval)

    async def task_event(self, kind: TaskEvent, task: Task, detail: str | None = None
                         ) -> None:
        """Tell everyone."""
        for listener in self.listeners:
            await listener.task_event(kind, task, detail)
