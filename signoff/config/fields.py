"""The building blocks of the config models: the frozen section base and the closed sets.

Split from `signoff.config.settings` so that the section modules can share them. The
`Section` base itself lives in `signoff.sections`, below the adapters, because each chat
surface brings its own section model (``signoff.adapters.slack.settings``).
"""

from __future__ import annotations

import enum

# The policy's own closed sets, read from the file as they are.
from signoff.runtime.policy.unattended import ApprovalMode, CronMode
from signoff.sections import Section

__all__ = ["ApprovalMode", "CronMode", "NotifyEvent", "PlannerKind", "PlannerMode", "Section"]


class PlannerKind(enum.StrEnum):
    """Which planner turns goals into actions."""

    RULES = "rules"
    OPENAI = "openai"


class PlannerMode(enum.StrEnum):
    """How an OpenAI-compatible planner works on a goal."""

    AGENT = "agent"  # turn by turn: the model sees each tool result (the default)
    PLAN = "plan"  # one call, a fixed plan, as in 0.1


class NotifyEvent(enum.StrEnum):
    """Task events a team channel can subscribe to."""

    QUEUED = "queued"
    STARTED = "started"
    AUTO_APPROVED = "auto_approved"  # a gated action ran without a person asked (a grant, ...)
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
