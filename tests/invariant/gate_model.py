"""What the gate promises, written down apart from the code that keeps it.

The stateful suite (`test_gate_invariant.py`) drives a real node and keeps, beside it, a
ledger of what it saw from the outside, as a person or a caller would:

* every request it made (a task's gated step, or an outside request), who asked it and
  under which policy (the task id, or the request's ``policy_id``);
* every answer it gave that the API accepted (200), with the content the person was
  shown at that moment (the card's request as ``GET /approvals`` listed it, or the
  edited args the person typed) and the card it was given on;
* every effect that ran: a task step the recording tool ran, or an action an outside
  caller performed because the daemon told it "approved".

`unjustified` is the invariant: each effect must match — tool, fingerprint and every
argument — an action shown to and approved by enough authorized people other than its
requester (the quorum counts people), on its own card or the card it shared, or be
covered by a live grant minted from such an approval under the same policy (a grant
covers the fingerprint, so there the content may differ, as the contract says).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

APPROVING = ("once", "session", "always")
NARROW = ("once", "session", "always")  # narrowest first, as `policy.quorum.narrowest`


def canonical(args: Mapping[str, Any]) -> str:
    """Args as one comparable string (key order does not matter)."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"))


@dataclass
class Request:
    """One request the suite made: a task (its gated steps) or an outside request."""

    key: str  # the task id, or the outside request's approval id
    kind: str  # "task" | "outside"
    requester: str  # the identity that asked, e.g. web:req1
    policy: str  # where its session/always grants live: the task id or the policy_id
    steps: dict[int, dict[str, Any]]  # step (0-based, as the task counts) -> {"tool", "args"} as asked
    approvals: dict[int, set[str]] = field(default_factory=dict)  # step -> approval ids
    leaders: dict[str, set[str]] = field(default_factory=dict)  # approval id -> cards shared


@dataclass(frozen=True)
class Vote:
    """One answer the API accepted on a card."""

    card: str
    actor: str
    scope: str  # once | session | always | deny
    tool: str
    args: str  # canonical args of what was shown (or typed, for an edit)
    fingerprint: str
    at: datetime
    lasts: timedelta | None = None


@dataclass(frozen=True)
class Effect:
    """One action that really happened."""

    request: str  # Request.key
    step: int
    tool: str
    args: str
    fingerprint: str
    at: datetime


@dataclass
class Ledger:
    """Everything the suite saw, and the rule every effect must satisfy."""

    needed: Callable[[str], int]  # tool -> people a request of it needs
    fingerprint: Callable[[str, Mapping[str, Any]], str]
    self_forbidden_for_tasks: bool  # approvals.forbid_self_approval
    person: Callable[[str], str] = lambda actor: actor
    requests: dict[str, Request] = field(default_factory=dict)
    votes: list[Vote] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)

    def request_of(self, approval_id: str) -> tuple[Request, int] | None:
        """The request and step an approval id was seen for."""
        for request in self.requests.values():
            for step, ids in request.approvals.items():
                if approval_id in ids:
                    return request, step
        return None

    def requester(self, request: Request, tool: str) -> str | None:
        """Who may not count towards this request's approval: an outside request's asker
        always; a task's submitter under a quorum or with forbid_self_approval (one person
        running their own agent may approve its steps, the contract's single-user mode)."""
        if request.kind == "outside" or self.self_forbidden_for_tasks or self.needed(tool) > 1:
            return request.requester
        return None

    def cards(self, request: Request, step: int) -> set[str]:
        """The cards an answer for this step could have been given on."""
        own = request.approvals.get(step, set())
        shared = {c for a in own for c in request.leaders.get(a, set())}
        return own | shared

    def approvers(self, request: Request, step: int, tool: str, args: str) -> list[Vote]:
        """Accepted approvals, on this step's cards, of exactly this content, by people
        other than the requester (one vote per person)."""
        asker = self.requester(request, tool)
        cards = self.cards(request, step)
        chosen: dict[str, Vote] = {}
        for vote in self.votes:
            if (vote.card in cards and vote.scope in APPROVING and vote.tool == tool
                    and vote.args == args
                    and (asker is None or self.person(vote.actor) != self.person(asker))):
                chosen.setdefault(self.person(vote.actor), vote)
        return list(chosen.values())

    def shown_and_approved(self, effect: Effect) -> bool:
        """The effect's own request was approved as it ran, by enough people."""
        request = self.requests[effect.request]
        votes = self.approvers(request, effect.step, effect.tool, effect.args)
        return len(votes) >= self.needed(effect.tool) and all(v.at <= effect.at for v in votes)

    def granted(self, effect: Effect) -> bool:
        """A live session/always grant of the same policy covers the effect: minted by an
        approval that itself satisfied the rule, for the same tool and fingerprint."""
        request = self.requests[effect.request]
        for source in self.requests.values():
            if source.policy != request.policy:
                continue
            for step, asked in source.steps.items():
                if asked["tool"] != effect.tool:
                    continue
                for shown in {(v.args, v.fingerprint) for v in self.votes
                              if v.card in self.cards(source, step)}:
                    votes = self.approvers(source, step, effect.tool, shown[0])
                    if shown[1] != effect.fingerprint or len(votes) < self.needed(effect.tool):
                        continue
                    if _grant_live(votes, effect.at):
                        return True
        return False

    def unjustified(self) -> list[Effect]:
        """Every effect the gate should never have let through."""
        return [e for e in self.effects if not (self.shown_and_approved(e) or self.granted(e))]

    def explain(self, effect: Effect) -> str:
        """The effect and what the ledger holds about its request, for a failure."""
        request = self.requests[effect.request]
        cards = self.cards(request, effect.step)
        lines = [f"effect: {effect}", f"request: {request}",
                 "votes on its cards:"]
        lines += [f"  {v}" for v in self.votes if v.card in cards] or ["  (none)"]
        return "\n".join(lines)


def _grant_live(votes: list[Vote], at: datetime) -> bool:
    """The grant these approvals make is live at ``at``: its scope is the narrowest any of
    them gave, and it lasts no longer than any of them said ("for"), counted from the
    approval that completed it — each person consented to no more than their own answer."""
    scope = min((v.scope for v in votes), key=NARROW.index)
    if scope == "once":
        return False
    last = max(votes, key=lambda v: v.at)
    if last.at > at:
        return False
    lasts = min((v.lasts for v in votes if v.lasts is not None), default=None)
    return lasts is None or at < last.at + lasts
