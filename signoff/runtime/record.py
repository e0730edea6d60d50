"""What the record teaches: decision statistics and suggestions, read from the audit log.

Everything here but `read_log` is a pure function of audit events (`signoff stats`,
`signoff suggest` and the console's stats page read the log and call it), so it is
tested on a seeded history with fixed dates.

- `stats`: how long people take to decide (p50/p90 of ``latency_ms`` of ``decision``
  events) per approver, surface, tool and risk; how many requests expired; how often each
  exact action (fingerprint) was approved, denied or expired.
- `suggest`: exact actions approved at least N times in a row and never denied, each
  proposed as a time-boxed grant (to give the next time a person approves it) or as a
  policy line. Nothing is ever applied from here: a suggestion is text for a person.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from signoff.runtime.models import AuditEvent, JsonDict
from signoff.runtime.schedule.durations import parse_duration
from signoff.runtime.store.port import TaskStore

DIMENSIONS = ("approver", "surface", "tool", "risk")
DEFAULT_STREAK = 5
DEFAULT_GRANT_FOR = "7d"
_BATCH = 20_000  # events per read of the log


async def read_log(store: TaskStore) -> list[AuditEvent]:
    """The whole audit log, in chain order."""
    events: list[AuditEvent] = []
    while batch := await store.audit_chain(after=events[-1].id if events else 0, limit=_BATCH):
        events.extend(batch)
    return events


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a duration back from ``now`` ("30d", "12h") or a date / time in ISO
    form ("2026-03-01", read as UTC); ValueError naming the forms otherwise."""
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: give a duration (30d, 12h) or a date "
                         "(2026-03-01)") from None
    return when if when.tzinfo else when.replace(tzinfo=now.tzinfo)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Timing:
    """Time to decide of one group of decisions, in milliseconds."""

    count: int
    p50_ms: float
    p90_ms: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Timing:
        """From the latencies of a group (not empty)."""
        return cls(len(values), percentile(values, 50), percentile(values, 90))


@dataclass
class ActionCount:
    """How one exact action (fingerprint) was decided."""

    fingerprint: str
    tool: str
    targets: list[str]
    risk: str | None
    approved: int = 0
    denied: int = 0
    expired: int = 0
    streak: int = 0  # approvals since the last answer that was not one
    last_at: datetime | None = None

    def public(self) -> JsonDict:
        """For --json."""
        return {"fingerprint": self.fingerprint, "tool": self.tool, "targets": self.targets,
                "risk": self.risk, "approved": self.approved, "denied": self.denied,
                "expired": self.expired, "approved_in_a_row": self.streak,
                "last_at": self.last_at.isoformat() if self.last_at else None}


@dataclass
class Stats:
    """The statistics of the decisions in ``[since, until]``."""

    since: datetime
    until: datetime
    decisions: int = 0
    approved: int = 0
    denied: int = 0
    expired: int = 0
    time_to_decide: dict[str, dict[str, Timing]] = field(default_factory=dict)
    actions: list[ActionCount] = field(default_factory=list)

    def public(self) -> JsonDict:
        """For --json and the console."""
        return {"since": self.since.isoformat(), "until": self.until.isoformat(),
                "decisions": self.decisions, "approved": self.approved,
                "denied": self.denied, "expired": self.expired,
                "time_to_decide": {dim: {k: vars(t) for k, t in groups.items()}
                                   for dim, groups in self.time_to_decide.items()},
                "actions": [a.public() for a in self.actions]}


def surface_of(channel: str | None) -> str:
    """The surface a decision came through (``slack:C1`` → ``slack``)."""
    return (channel or "unknown").split(":", 1)[0] or "unknown"


def _keys(event: AuditEvent) -> dict[str, str]:
    return {"approver": event.actor or "unknown", "surface": surface_of(event.channel),
            "tool": event.tool or "unknown", "risk": event.risk or "unknown"}


def count_actions(events: Iterable[AuditEvent]) -> list[ActionCount]:
    """Each exact action's answers, in chain order; most approved first."""
    actions: dict[str, ActionCount] = {}
    for event in events:
        if event.fingerprint is None or event.kind not in ("decision", "expired"):
            continue
        count = actions.get(event.fingerprint)
        if count is None:
            count = actions[event.fingerprint] = ActionCount(
                event.fingerprint, event.tool or "unknown", list(event.targets), event.risk)
        count.last_at = event.at
        if event.kind == "expired":
            count.expired, count.streak = count.expired + 1, 0
        elif event.decision == "approve":
            count.approved, count.streak = count.approved + 1, count.streak + 1
        else:
            count.denied, count.streak = count.denied + 1, 0
    return sorted(actions.values(), key=lambda a: (-a.approved, a.tool, a.fingerprint))


def stats(events: Iterable[AuditEvent], *, since: datetime, until: datetime) -> Stats:
    """The statistics of the decision events sealed in ``[since, until]``."""
    result = Stats(since=since, until=until)
    waits: dict[str, dict[str, list[float]]] = {dim: {} for dim in DIMENSIONS}
    chosen = [e for e in events if since <= e.at <= until]
    for event in chosen:
        if event.kind == "expired":
            result.expired += 1
        if event.kind != "decision":
            continue
        result.decisions += 1
        if event.decision == "approve":
            result.approved += 1
        else:
            result.denied += 1
        if event.latency_ms is not None:
            for dim, key in _keys(event).items():
                waits[dim].setdefault(key, []).append(event.latency_ms)
    result.time_to_decide = {dim: {k: Timing.of(v) for k, v in sorted(groups.items())}
                             for dim, groups in waits.items()}
    result.actions = count_actions(chosen)
    return result


@dataclass(frozen=True)
class Suggestion:
    """An exact action a person may choose to stop being asked about."""

    action: ActionCount
    grant_for: str

    @property
    def grant(self) -> str:
        """The time-boxed grant, given by a person the next time it is asked."""
        return (f"next time it is asked: signoff approve ID --scope always --for "
                f"{self.grant_for}  (or Always, for {self.grant_for}, on its card)")

    @property
    def policy(self) -> str:
        """A Cedar policy line that permits the tool on these targets (broader than the
        exact action: the policy sees the tool and its targets, not every argument)."""
        targets = self.action.targets or [""]
        parts = " || ".join(f'resource == Signoff::Target::"{_cedar(t)}"' for t in targets)
        return (f'permit(principal, action == Signoff::Action::"{_cedar(self.action.tool)}", '
                f"resource) when {{ {parts} }};")

    def public(self) -> JsonDict:
        """For --json."""
        return {**self.action.public(), "grant": self.grant, "policy": self.policy}


def _cedar(text: str) -> str:
    """A string as it may stand inside a Cedar string literal."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def suggest(events: Iterable[AuditEvent], *, streak: int = DEFAULT_STREAK,
            grant_for: str = DEFAULT_GRANT_FOR) -> list[Suggestion]:
    """Exact actions whose last ``streak`` (or more) answers were approvals and which
    were never denied (an expiry ends a row but is no denial); longest row first."""
    if streak < 1:
        raise ValueError(f"--min {streak}: an action must be approved at least once")
    parse_duration(grant_for)  # a bad time box is an error here, not in the advice
    found = [a for a in count_actions(events) if a.denied == 0 and a.streak >= streak]
    found.sort(key=lambda a: (-a.streak, a.tool, a.fingerprint))
    return [Suggestion(a, grant_for) for a in found]

