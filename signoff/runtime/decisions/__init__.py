"""The one writer of decisions: a person's answer, an expiry, a hold, a revoked grant.

`answer.answer` is the pure rule that says what an answer does to a request; `Decider`
(`decider`) reads, asks it, commits its outcome in one compare-and-set and announces it.
The Decider holds, by composition, a `Settler` (`settle`: the commit, task moves and
announcement every decision shares) and the parts built on it: `Holds` (`hold`: the
undo window), `Expiry` (`expiry`) and `Members` (`members`: requests sharing a card).
"""

from signoff.runtime.decisions.decider import Decider
from signoff.runtime.decisions.settle import DecisionResult, Runnable

__all__ = ["Decider", "DecisionResult", "Runnable"]
