"""What one answer does to a request: the decision rule, as a pure function.

`answer` takes the request as stored, its task (None for an outside request), the answer
(scope, actor, time box, edited action), the rules that apply and the time, and returns
what should be committed: the counted or decided request, the grant to mint, the audit
event, the outbox rows, the task's move and the words for the person who answered — or
the refusal. No I/O, no store, no clock: `signoff.runtime.decisions.decider.Decider`
reads, calls this, commits its result in one compare-and-set and announces it.

The rules it holds: a request whose task moved on is not decided; the self-approval rule
and the one-vote-per-person rule compare *people* (`signoff.runtime.people`), so an
outside request is never approved by whoever asked it, from any of their accounts; under
a quorum each approval is counted while the request stays pending, the one that reaches
it decides with the narrowest scope and the shortest time box among them, one deny
denies; an approval under a hold parks the request as ``held`` with no grant yet.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from signoff.runtime import coalesce
from signoff.runtime.decisions.settle import DecisionResult
from signoff.runtime.events import ApprovalEvent, approval_event, audit_event
from signoff.runtime.models import (
    Action,
    Approval,
    ApprovalStatus,
    AuditEvent,
    DecisionCode,
    Grant,
    Scope,
    Task,
    TaskState,
    Vote,
)
from signoff.runtime.people import People
from signoff.runtime.policy.grants import grant_for, home_of, policy_of
from signoff.runtime.policy.quorum import narrowest
from signoff.runtime.store.port import OutboxItem
from signoff.runtime.words import SCOPE_WORDS, held_words, progress

__all__ = ["Answer", "Move", "Outcome", "Rules", "answer", "grant_lasts", "not_waiting",
           "requester_of", "self_forbidden", "terms_refusal"]


@dataclass(frozen=True)
class Rules:
    """What the configuration says about deciding one request."""

    people: People = field(default_factory=People)
    forbid_self_approval: bool = False
    grant_ttl: timedelta | None = None  # how long an always grant lasts when not told
    hold: timedelta | None = None  # the undo window after this request's approval


@dataclass(frozen=True)
class Answer:
    """One answer to a request. ``edited``: the action approved instead of the one asked;
    ``in_group``: a member taking its card's decision (it is not held a second time),
    with ``counted``, the votes that count for it under its own quorum."""

    scope: Scope
    actor: str
    reason: str | None = None
    channel: str | None = None
    lasts: timedelta | None = None
    edited: Action | None = None
    in_group: bool = False
    counted: list[Vote] | None = None


class Move(enum.Enum):
    """What the commit does to the task waiting for the request."""

    NONE = "none"  # refused: nothing is committed
    WAIT = "wait"  # it keeps waiting, with the counted or held request
    DECIDE = "decide"  # approved (it runs) or denied (it fails or the model is told)


@dataclass
class Outcome:
    """What to commit for one answer (nothing when ``move`` is `Move.NONE`), and what to
    tell whoever answered. ``votes_expect``: the vote count the compare-and-set expects;
    ``refused``: why the attempt is audited as refused."""

    result: DecisionResult
    move: Move = Move.NONE
    refused: str | None = None
    approval: Approval | None = None
    grants: list[Grant] = field(default_factory=list)
    audit: list[AuditEvent] = field(default_factory=list)
    outbox: list[OutboxItem] = field(default_factory=list)
    votes_expect: int | None = None
    edited: Action | None = None


def requester_of(task: Task | None, approval: Approval) -> str | None:
    """Who asked: the API caller of an outside request, else the task's submitter."""
    return approval.submitted_by or (task.submitted_by if task else None)


def not_waiting(task: Task | None, approval: Approval) -> DecisionResult | None:
    """The refusal when ``approval`` belongs to a task that no longer waits for it."""
    if approval.task_id is None or (
            task is not None and task.state is TaskState.WAITING_APPROVAL
            and task.approval is not None and task.approval.id == approval.id):
        return None
    state = task.state.value if task else "missing"
    return DecisionResult(False, DecisionCode.NOT_WAITING, f"The task is {state}, not waiting",
                          task=task, approval=approval)


def self_forbidden(approval: Approval, rules: Rules) -> bool:
    """True when the requester's own approval is refused: always for an outside request
    (never approved by the identity that asked it), always under a quorum (two people
    means two people other than the one asking), and for a task's request when
    ``approvals.forbid_self_approval`` says so."""
    return approval.outside or approval.needed > 1 or rules.forbid_self_approval


def grant_lasts(scope: Scope, asked: timedelta | None, rules: Rules) -> timedelta | None:
    """How long the grant of this answer lasts: as asked, else approvals.grant_ttl for an
    always grant; None: as long as its scope."""
    if asked is not None or scope is not Scope.ALWAYS:
        return asked
    return rules.grant_ttl


def terms_refusal(approval: Approval, scope: Scope, lasts: timedelta | None,
                  edits: bool) -> str | None:
    """Why the terms of an answer (its time box, whether it carries edited args) do not
    fit it; None when they do."""
    if lasts is not None and scope not in (Scope.SESSION, Scope.ALWAYS):
        return f"for: only a session or always answer can be time-boxed, not '{scope.value}'"
    if lasts is not None and lasts <= timedelta(0):
        return "for: must be a positive duration"
    if edits and not scope.approves:
        return "args: only an approval can carry edited args"
    if edits and approval.needed > 1:
        # Every approver of a quorum must approve the same action.
        return f"args: a request that needs {approval.needed} approvals cannot be edited"
    return None


def more(approval: Approval) -> str:
    """How many approvals a quorum still waits for, in words."""
    missing = approval.needed - len(approval.votes)
    return "one more" if missing == 1 else f"{missing} more"


def answer(approval: Approval, task: Task | None, given: Answer, rules: Rules,
           now: datetime) -> Outcome:
    """What ``given`` does to the pending ``approval`` (and its ``task``) at ``now``."""
    refused = _check(task, approval, given, rules)
    if refused is not None:
        return refused
    if (given.scope.approves and not given.in_group
            and len(approval.votes) + 1 < approval.needed):
        return _vote(task, approval, given, now)
    return _decide(task, approval, given, rules, now)


def _check(task: Task | None, approval: Approval, given: Answer,
           rules: Rules) -> Outcome | None:
    """What stands in the way of this answer besides the request's own status."""
    moved = not_waiting(task, approval)
    if moved is not None:
        return Outcome(moved)
    if not given.scope.approves or given.in_group:
        return None
    people, requester = rules.people, requester_of(task, approval)
    if self_forbidden(approval, rules) and people.same(requester, given.actor):
        what = "task" if task is not None else "request"
        return Outcome(DecisionResult(
            False, DecisionCode.NOT_AUTHORIZED, f"You submitted this {what} (as {requester}); "
            f"someone else must approve it", task=task, approval=approval),
            refused="self-approval is forbidden")
    if any(people.same(v.actor, given.actor) for v in approval.votes):
        return Outcome(DecisionResult(
            False, DecisionCode.ALREADY_COUNTED, f"You already approved this request; it "
            f"counts once ({progress(approval)} — waiting for {more(approval)})", task=task,
            approval=approval), refused="already approved by this person")
    return None


def _vote(task: Task | None, approval: Approval, given: Answer, now: datetime) -> Outcome:
    """Count one approval towards the quorum; the request stays pending."""
    vote = Vote(actor=given.actor, scope=given.scope, at=now, channel=given.channel,
                lasts=given.lasts)
    counted = approval.model_copy(update={"votes": [*approval.votes, vote]})
    words = progress(counted)
    event = audit_event("approval_partial", task, approval.action, decision="approve",
                        actor=given.actor, scope=given.scope.value, reason=words,
                        approval=counted, channel=given.channel)
    return Outcome(
        DecisionResult(True, DecisionCode.PARTIAL, f"{words} — waiting for {more(counted)}",
                       task=task, approval=counted),
        move=Move.WAIT, approval=counted, audit=[event], votes_expect=len(approval.votes),
        outbox=[approval_event(ApprovalEvent.VOTED, approval.id,
                               suffix=f":{len(counted.votes)}")])


def _quorum(approval: Approval, given: Answer, now: datetime
            ) -> tuple[list[Vote], Scope, timedelta | None] | None:
    """The votes of the approval that completes a quorum, the narrowest scope among them
    (a session or always grant needs all of them to have meant it) and the shortest time
    box any of them gave (nobody agreed to longer); None when no quorum applies."""
    if not given.scope.approves or approval.needed <= 1:
        return None
    votes = given.counted if given.counted is not None else [
        *approval.votes, Vote(actor=given.actor, scope=given.scope, at=now,
                              channel=given.channel, lasts=given.lasts)]
    boxes = [v.lasts for v in votes if v.lasts is not None]
    return votes, narrowest([v.scope for v in votes]), min(boxes) if boxes else None


def _decided(approval: Approval, given: Answer, rules: Rules, now: datetime
             ) -> tuple[Approval, list[Vote] | None, list[OutboxItem]]:
    """The decided request, the votes that decided it (a quorum) and its outbox rows."""
    scope, lasts = given.scope, given.lasts
    update: dict[str, object] = {
        "status": ApprovalStatus.APPROVED if scope.approves else ApprovalStatus.DENIED,
        "scope": scope, "decided_by": given.actor, "decided_at": now, "reason": given.reason}
    if given.edited is not None:
        update |= {"action": given.edited, "original_action": approval.action}
    quorum = _quorum(approval, given, now)
    if quorum is not None:
        votes, scope, lasts = quorum
        update |= {"votes": votes, "scope": scope}
    if scope.approves:
        # Kept on the request: the grant is made on release after a hold, and the
        # members of a group take the same time box as the answer on their card.
        update["grant_lasts"] = lasts
        # A member of a group follows its leader's final answer, which has waited out
        # the undo window already: it is not held a second time.
        if rules.hold and not given.in_group:
            update |= {"status": ApprovalStatus.HELD, "hold_until": now + rules.hold}
    outbox = [approval_event(ApprovalEvent.DECIDED, approval.id)]
    if not coalesce.has_own_card(approval):
        outbox = []  # no card of its own to edit
        if not given.in_group:
            update["coalesced_into"] = None
            outbox = [coalesce.left_event(approval)]  # the shared card's count drops
    return approval.model_copy(update=update), quorum[0] if quorum else None, outbox


def _decide(task: Task | None, approval: Approval, given: Answer, rules: Rules,
            now: datetime) -> Outcome:
    """The answer that decides the request (approved, held or denied)."""
    decided, votes, outbox = _decided(approval, given, rules, now)
    scope = decided.scope or given.scope
    note = given.reason
    if votes is not None:
        note = f"{progress(decided)}: " + ", ".join(v.actor for v in votes)
    if decided.hold_until is not None:
        note = (f"{note}; " if note else "") + held_words(decided)
    event = audit_event("decision", task, decided.action,
                        decision="approve" if scope.approves else "deny", actor=given.actor,
                        scope=scope.value, reason=note, approval=decided,
                        channel=given.channel,
                        latency_ms=(now - approval.requested_at).total_seconds() * 1000)
    if given.edited is not None:
        event.original_fingerprint = approval.action.fingerprint
    grants: list[Grant] = []
    if scope.approves and decided.hold_until is None:
        policy_id, home = policy_of(approval, task), home_of(approval, task)
        grants.append(grant_for(decided.action, scope, policy_id=policy_id, home=home,
                                task_id=task.id if task else None, actor=given.actor,
                                now=now, lasts=decided.grant_lasts,
                                schedule_definition=task.schedule_definition if task
                                else None))
    words = SCOPE_WORDS[scope] + (" (edited)" if given.edited is not None else "")
    if grants and grants[0].expires_at is not None and scope is not Scope.ONCE:
        words += f" until {grants[0].expires_at.strftime('%Y-%m-%d %H:%M UTC')}"
    if votes is not None:
        words = f"{words} ({progress(decided)})"
    if decided.hold_until is not None:
        words = f"{words} — {held_words(decided)}"
    return Outcome(DecisionResult(True, DecisionCode.OK, words, task=task, approval=decided),
                   move=Move.WAIT if decided.hold_until is not None else Move.DECIDE,
                   approval=decided, grants=grants, audit=[event], outbox=outbox,
                   votes_expect=len(approval.votes) if votes is not None else None,
                   edited=given.edited)
