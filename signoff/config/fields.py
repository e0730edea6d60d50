"""The building blocks of the config models: the frozen section base and the closed sets.

Split from `signoff.config.settings` so that the section modules can share them.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict

# The policy's own closed sets, read from the file as they are.
from signoff.runtime.policy.unattended import ApprovalMode, CronMode

__all__ = ["ApprovalMode", "CronMode", "NotifyEvent", "PlannerKind", "Section", "SlackMode",
           "TelegramMode"]


class Section(BaseModel):
    # Frozen: settings are read by many components and must not be patched at runtime;
    # CLI flags produce a new copy with model_copy(update=...).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PlannerKind(enum.StrEnum):
    """Which planner turns goals into actions."""

    RULES = "rules"
    OPENAI = "openai"


class SlackMode(enum.StrEnum):
    """Socket Mode (no public URL needed) or HTTP events on /slack/events."""

    SOCKET = "socket"
    HTTP = "http"


class TelegramMode(enum.StrEnum):
    """Long polling (no public URL needed) or a webhook on /telegram/webhook."""

    POLLING = "polling"
    WEBHOOK = "webhook"


class NotifyEvent(enum.StrEnum):
    """Task events a team channel can subscribe to."""

    QUEUED = "queued"
    WAITING_APPROVAL = "waiting_approval"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    ESCALATED = "escalated"
    SKIPPED = "skipped"
    AUDIT_HEAD = "audit_head"  # once a day: the audit chain's COUNT:HASH, to keep elsewhere
