"""Where the policy sends one action (`Route`), and the audit events of the automatic ways.

`Engine.route` decides; the engine's fixed steps and the agent loop both act on the
answer, so "what runs, what asks, what is refused" is one rule for both.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from signoff.runtime.events import audit_event
from signoff.runtime.models import Action, AuditEvent, Task


class RouteKind(enum.StrEnum):
    """Where the policy sends one action."""

    RUN = "run"  # autonomous: it runs
    GATED = "gated"  # gated, but allowed without asking (a grant or an automatic answer)
    BLOCK = "block"  # refused
    FAIL = "fail"  # it can never succeed: fails before anyone is asked
    ASK = "ask"  # a person decides


@dataclass(frozen=True)
class Route:
    """Where the policy sends one action: run it (autonomous or gated), block it, fail it
    (it can never succeed: nobody is asked), or ask a person."""

    kind: RouteKind
    decision: str = "allow"  # for gated: grant | auto (the action record's decision)
    actor: str | None = None
    reason: str = ""
    audit_kind: str | None = "decision"  # for gated: the audit event written before it runs
    action: Action | None = None  # the action as the policy judged it, when it relabelled it


def gated_audit(task: Task, action: Action, route: Route) -> list[AuditEvent]:
    """The audit event of a gated action that runs without asking (grant or automatic)."""
    if not route.audit_kind:
        return []
    return [audit_event(route.audit_kind, task, action,
                        decision="ALLOW" if route.decision == "grant" else "approve",
                        actor=route.actor, reason=route.reason or None,
                        scope="once" if route.decision == "auto" else None)]


_AUTO_WORDS = {"auto:cron_mode": "cron_mode = approve", "auto:smart": "smart approval",
               "auto:yolo": "yolo", "auto:mode_off": "approvals.mode = off"}


def auto_words(actor: str | None, reason: str | None) -> str:
    """Why a gated action runs without a person, in a team line's words: the grant that
    covers it ("always grant g-…", "pre-authorized by schedule nightly") or the rule."""
    if actor in _AUTO_WORDS:
        return _AUTO_WORDS[actor or ""]
    return reason or actor or "automatic approval"
