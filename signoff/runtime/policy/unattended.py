"""What ASK_USER becomes when the run context says who can answer: a request to a person,
an automatic approval, an automatic block, or the smart judge."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from signoff.runtime.models import RunMode, Task


class ApprovalMode(enum.StrEnum):
    """How ASK_USER is resolved for interactive tasks (``approvals.mode``)."""

    MANUAL = "manual"
    SMART = "smart"
    OFF = "off"


class CronMode(enum.StrEnum):
    """How ASK_USER is resolved for scheduled tasks (``approvals.cron_mode``)."""

    DENY = "deny"
    APPROVE = "approve"
    ASK = "ask"


class Outcome(enum.StrEnum):
    """What ASK_USER turned into."""

    ASK = "ask"  # post a request and wait for a person
    ALLOW = "allow"  # approved automatically
    BLOCK = "block"  # refused automatically
    JUDGE = "judge"  # the smart judge decides


@dataclass(frozen=True)
class Unattended:
    """How ASK_USER is settled when the run context says so."""

    mode: ApprovalMode = ApprovalMode.MANUAL
    cron_mode: CronMode = CronMode.DENY  # the default; a schedule's own cron_mode wins
    strict_yolo: bool = False


@dataclass(frozen=True)
class Resolution:
    """ASK_USER turned into: ask (a person), allow (automatic) or block."""

    outcome: Outcome
    actor: str | None = None
    reason: str = ""


def resolve_unattended(task: Task, rules: Unattended) -> Resolution:
    """What ASK_USER becomes for this task; BLOCK is never reached here."""
    auto: str | None = None
    if task.mode is RunMode.YOLO:
        auto = "auto:yolo"
    elif rules.mode == ApprovalMode.OFF:
        auto = "auto:mode_off"
    if auto:
        if rules.strict_yolo:
            return Resolution(Outcome.BLOCK, auto,
                              "needs approval and evaluation.strict_yolo is set")
        return Resolution(Outcome.ALLOW, auto, "automatic approval")
    if task.mode is RunMode.SCHEDULED:
        cron_mode = task.cron_mode or rules.cron_mode
        if cron_mode == CronMode.APPROVE:
            return Resolution(Outcome.ALLOW, "auto:cron_mode", "cron_mode is approve")
        if cron_mode == CronMode.DENY:
            return Resolution(Outcome.BLOCK, "auto:cron_mode",
                              "needs approval but cron_mode is deny")
        return Resolution(Outcome.ASK, None, "cron_mode is ask")
    if task.mode is RunMode.NON_INTERACTIVE:
        return Resolution(Outcome.BLOCK, "auto:non_interactive",
                          "needs approval and nobody can answer (non-interactive)")
    if rules.mode == ApprovalMode.SMART:
        return Resolution(Outcome.JUDGE, "auto:smart", "smart approval")
    return Resolution(Outcome.ASK, None, "a person decides")
