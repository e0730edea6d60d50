"""The decision rule as a table: request × answer × votes × hold → state, grants, words.

`signoff.runtime.decisions.answer.answer` is pure (no store, no clock), so each row is
one call with its inputs spelled out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from signoff.runtime.decisions.answer import Answer, Move, Rules, answer, terms_refusal
from signoff.runtime.models import (
    Action,
    Approval,
    ApprovalStatus,
    DecisionCode,
    RiskClass,
    Scope,
    Task,
    TaskState,
    Vote,
)
from signoff.runtime.people import People

NOW = datetime(2030, 1, 2, 14, 0, tzinfo=UTC)
ACTION = Action(tool="send_email", args={"to": "john@example.com"}, risk=RiskClass.SEND,
                capability="email.send", targets=("john@example.com",),
                fingerprint="john@example.com")
PEOPLE = People.of([("alice", ["alice", "slack:U1"])])


def _vote(actor: str, scope: Scope = Scope.ONCE, lasts: timedelta | None = None) -> Vote:
    return Vote(actor=actor, scope=scope, at=NOW - timedelta(minutes=1), lasts=lasts)


@dataclass(frozen=True)
class Row:
    """One case: the inputs and what the answer must come to."""

    name: str
    scope: Scope
    actor: str = "bob"
    needed: int = 1
    votes: tuple[Vote, ...] = ()
    hold: timedelta | None = None
    outside: bool = False
    forbid_self: bool = False
    lasts: timedelta | None = None
    code: DecisionCode = DecisionCode.OK
    status: ApprovalStatus | None = ApprovalStatus.APPROVED
    grants: int = 1
    words: str = "Approved once"
    extra: dict[str, object] = field(default_factory=dict)


ROWS = [
    Row("once approves and grants once", Scope.ONCE),
    Row("deny denies without a grant", Scope.DENY, status=ApprovalStatus.DENIED, grants=0,
        words="Denied"),
    Row("a time-boxed session grant says until when", Scope.SESSION,
        lasts=timedelta(minutes=30),
        words="Approved for this session until 2030-01-02 14:30 UTC"),
    Row("a hold parks the approval with no grant yet", Scope.ONCE,
        hold=timedelta(seconds=30), status=ApprovalStatus.HELD, grants=0,
        words="Approved once — runs at 14:00:30 UTC unless undone"),
    Row("a hold does not park a deny", Scope.DENY, hold=timedelta(seconds=30),
        status=ApprovalStatus.DENIED, grants=0, words="Denied"),
    Row("the first of two approvals is counted, nothing decided", Scope.ONCE, needed=2,
        code=DecisionCode.PARTIAL, status=ApprovalStatus.PENDING, grants=0,
        words="1 of 2 approvals — waiting for one more"),
    Row("the approval reaching the quorum grants the narrowest scope", Scope.ALWAYS,
        needed=2, votes=(_vote("carol", Scope.SESSION),),
        words="Approved for this session (2 of 2 approvals)"),
    Row("the quorum's grant lasts the shortest time box given", Scope.SESSION, needed=2,
        votes=(_vote("carol", Scope.SESSION, timedelta(minutes=10)),),
        lasts=timedelta(hours=1),
        words="Approved for this session until 2030-01-02 14:10 UTC (2 of 2 approvals)"),
    Row("one deny denies a quorum", Scope.DENY, needed=2, votes=(_vote("carol"),),
        status=ApprovalStatus.DENIED, grants=0, words="Denied"),
    Row("the same person approving twice counts once", Scope.ONCE, actor="carol", needed=3,
        votes=(_vote("carol"),), code=DecisionCode.ALREADY_COUNTED, status=None, grants=0,
        words="You already approved this request; it counts once (1 of 3 approvals — "
              "waiting for 2 more)"),
    Row("an outside request is never approved by its asker", Scope.ONCE, actor="alice",
        outside=True, code=DecisionCode.NOT_AUTHORIZED, status=None, grants=0,
        words="You submitted this request (as alice); someone else must approve it"),
    Row("nor by another account of the same person", Scope.ONCE, actor="slack:U1",
        outside=True, code=DecisionCode.NOT_AUTHORIZED, status=None, grants=0,
        words="You submitted this request (as alice); someone else must approve it"),
    Row("the asker may deny their own request", Scope.DENY, actor="alice", outside=True,
        status=ApprovalStatus.DENIED, grants=0, words="Denied"),
    Row("a task's submitter approves it unless self-approval is forbidden", Scope.ONCE,
        actor="alice"),
    Row("forbid_self_approval refuses the task's submitter", Scope.ONCE, actor="alice",
        forbid_self=True, code=DecisionCode.NOT_AUTHORIZED, status=None, grants=0,
        words="You submitted this task (as alice); someone else must approve it"),
]


def _inputs(row: Row) -> tuple[Approval, Task | None]:
    approval = Approval(id="ap-1", task_id=None if row.outside else "t-1", action=ACTION,
                        requested_at=NOW - timedelta(minutes=5),
                        expires_at=NOW + timedelta(hours=1), needed=row.needed,
                        votes=list(row.votes), submitted_by="alice" if row.outside else None,
                        policy_id="p-1")
    if row.outside:
        return approval, None
    task = Task(id="t-1", goal="g", state=TaskState.WAITING_APPROVAL, steps=[],
                approval=approval, submitted_by="alice")
    return approval, task


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_answer_table(row: Row) -> None:
    """Each answer decides, counts or is refused exactly as the decision rule says."""
    approval, task = _inputs(row)
    rules = Rules(people=PEOPLE, forbid_self_approval=row.forbid_self, hold=row.hold)
    outcome = answer(approval, task,
                     Answer(scope=row.scope, actor=row.actor, lasts=row.lasts), rules, NOW)
    assert outcome.result.code is row.code
    assert outcome.result.message == row.words
    assert len(outcome.grants) == row.grants
    if row.status is None:
        assert outcome.move is Move.NONE and outcome.approval is None
        assert outcome.refused is not None  # the attempt is audited as refused
        return
    assert outcome.approval is not None and outcome.approval.status is row.status
    assert approval.status is ApprovalStatus.PENDING  # the input is left as it was
    assert len(outcome.audit) == 1


def test_answer_to_a_task_that_moved_on_is_refused_without_an_audit_line() -> None:
    """An answer to a request whose task no longer waits for it decides nothing."""
    approval, task = _inputs(Row("moved", Scope.ONCE))
    assert task is not None
    task.state = TaskState.COMPLETED
    outcome = answer(approval, task, Answer(scope=Scope.ONCE, actor="bob"), Rules(), NOW)
    assert outcome.result.code is DecisionCode.NOT_WAITING
    assert outcome.move is Move.NONE and outcome.refused is None


def test_an_always_answer_records_its_time_box() -> None:
    """A decided always grant records exactly the time box it was given."""
    approval, task = _inputs(Row("always", Scope.ALWAYS))
    outcome = answer(approval, task, Answer(scope=Scope.ALWAYS, actor="bob",
                                            lasts=timedelta(days=7)), Rules(), NOW)
    assert outcome.approval is not None
    assert outcome.approval.grant_lasts == timedelta(days=7)
    assert outcome.grants[0].expires_at == NOW + timedelta(days=7)
    assert outcome.result.message == "Approved always until 2030-01-09 14:00 UTC"


def test_a_group_member_following_its_card_is_not_held_twice() -> None:
    """A member taking its card's released approval runs without a second undo window."""
    approval, task = _inputs(Row("member", Scope.ONCE))
    given = Answer(scope=Scope.ONCE, actor="bob", in_group=True)
    outcome = answer(approval, task, given, Rules(hold=timedelta(minutes=1)), NOW)
    assert outcome.approval is not None
    assert outcome.approval.status is ApprovalStatus.APPROVED and outcome.move is Move.DECIDE


@pytest.mark.parametrize(("scope", "lasts", "edits", "needed", "why"), [
    (Scope.ONCE, timedelta(minutes=5), False, 1,
     "for: only a session or always answer can be time-boxed, not 'once'"),
    (Scope.SESSION, timedelta(0), False, 1, "for: must be a positive duration"),
    (Scope.DENY, None, True, 1, "args: only an approval can carry edited args"),
    (Scope.ONCE, None, True, 2, "args: a request that needs 2 approvals cannot be edited"),
    (Scope.SESSION, timedelta(minutes=5), True, 1, None),
])
def test_terms_of_an_answer(scope: Scope, lasts: timedelta | None, edits: bool,
                            needed: int, why: str | None) -> None:
    """A time box or an edit that does not fit the answer is refused with the reason."""
    approval, _ = _inputs(Row("terms", scope, needed=needed))
    assert terms_refusal(approval, scope, lasts, edits) == why
