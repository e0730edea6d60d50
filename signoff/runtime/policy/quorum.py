"""How many people must approve an action, and how long an approved one waits.

`[policy.quorum]` maps a capability ("fs.delete") or a risk class ("DESTRUCTIVE") to a
number of distinct approvers; `approvals.hold` maps a risk class to an undo window. Both
are looked up here and nowhere else, once, when a request is made (quorum) or completed
(hold), so a config change never moves the goalposts of a request already asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from signoff.runtime.models import Action, RiskClass, Scope

# Narrowest first: the scope granted when several people approved with different scopes.
_NARROW = (Scope.ONCE, Scope.SESSION, Scope.ALWAYS)


@dataclass(frozen=True)
class ApprovalRules:
    """Quorum sizes (by capability or risk class) and hold windows (by risk class)."""

    quorum: Mapping[str, int] = field(default_factory=dict)
    hold: Mapping[RiskClass, timedelta] = field(default_factory=dict)

    def needed(self, action: Action) -> int:
        """Distinct approvers ``action`` needs: the larger of its capability's and its risk
        class's entry (both may be listed; the stricter rule wins), at least 1."""
        by_capability = self.quorum.get(action.capability or "", 1)
        by_risk = self.quorum.get(action.risk.value, 1) if action.risk else 1
        return max(1, by_capability, by_risk)

    def hold_for(self, action: Action) -> timedelta:
        """The undo window after ``action`` is approved (zero: it runs at once)."""
        if action.risk is None:
            return timedelta(0)
        return self.hold.get(action.risk, timedelta(0))


def narrowest(scopes: list[Scope]) -> Scope:
    """The narrowest of several approving scopes: what a quorum grants (a session or
    always grant needs everyone who approved to have meant at least that much)."""
    return min(scopes, key=_NARROW.index)
