"""Every phrase a person reads about a decision, in one place.

The decider's answers ("Approved for this session until …"), a card's outcome line
("Approved once by alice at 14:03 UTC — runs at 14:05:00 UTC unless undone"), a quorum's
progress ("1 of 2 approvals") and why a task did not go on ("user denied: …", "approval
timed out") are all built from these, so a surface, the console and the CLI never word
the same decision two ways. The runtime owns them because the decider answers with them;
the bot's cards read them from here.
"""

from __future__ import annotations

from datetime import datetime

from signoff.runtime.models import Approval, ApprovalStatus, Scope

SCOPE_WORDS = {
    Scope.ONCE: "Approved once",
    Scope.SESSION: "Approved for this session",
    Scope.ALWAYS: "Approved always",
    Scope.DENY: "Denied",
}

USER_DENIED = "user denied"
TIMED_OUT = "approval timed out"
ALREADY_DECIDED = "Already decided"
WITHDRAWN = "Withdrawn"


def at_hhmm(at: datetime | None) -> str:
    """"14:03 UTC", the time a decision is shown with ("?" when unknown)."""
    return at.strftime("%H:%M UTC") if at else "?"


def refusal_reason(approval: Approval) -> str:
    """Why a decided request did not approve: "user denied[: why]" or "approval timed out"."""
    if approval.status is ApprovalStatus.EXPIRED:
        return TIMED_OUT
    return f"{USER_DENIED}: {approval.reason}" if approval.reason else USER_DENIED


def progress(approval: Approval, votes: int | None = None) -> str:
    """"1 of 2 approvals" (``votes``: a count other than the stored one)."""
    count = len(approval.votes) if votes is None else votes
    return f"{count} of {approval.needed} approvals"


def held_words(approval: Approval) -> str:
    """"runs at 14:03:30 UTC unless undone"."""
    when = approval.hold_until.strftime("%H:%M:%S UTC") if approval.hold_until else "?"
    return f"runs at {when} unless undone"
