"""Who may decide a request: the approvers list, whoever is on call, console key holders.

Chat users are identified by platform user id (``slack:U123``, ``telegram:42``), never
by display name or channel membership: in a group chat anyone can press a button.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from signoff.runtime.models import Approval

# Surfaces whose callers were already authenticated by their own means: the API/console
# (a valid key) and the terminal (the person who ran `signoff handle`).
TRUSTED_SURFACES = frozenset({"web", "terminal", "cli"})

OnCall = Callable[[], Iterable[str]]


@dataclass
class Authorizer:
    """Decides whether an actor may answer an approval request."""

    approvers: frozenset[str] = frozenset()
    oncall: OnCall | None = None
    trusted_surfaces: frozenset[str] = field(default=TRUSTED_SURFACES)

    def deciders(self, approval: Approval) -> set[str]:
        """Everyone who may decide this request right now."""
        people = set(self.approvers) | set(approval.approvers)
        if self.oncall is not None:
            people |= set(self.oncall())
        return people

    def may_decide(self, actor: str, approval: Approval) -> bool:
        """True for the approvers list, on-call members, escalation targets and key holders."""
        platform = actor.partition(":")[0]
        if platform in self.trusted_surfaces:
            return True
        return actor in self.deciders(approval)
