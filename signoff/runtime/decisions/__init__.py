"""The one writer of decisions: a person's answer, an expiry, a hold, a revoked grant.

`Decider` (in `decider`) commits every answer; `answer` (in `answer`) is the pure rule
that says what an answer does; `Settler` (in `settle`) holds the moves every decision
shares, and `Holds` (in `hold`) the undo window.
"""

from signoff.runtime.decisions.decider import Decider
from signoff.runtime.decisions.settle import DecisionResult, Runnable

__all__ = ["Decider", "DecisionResult", "Runnable"]
