"""What every framework adapter shares: the words a model reads when signoff does not
approve, and one tool call as signoff is asked about it.

A denial, an expiry, a block and an unreachable daemon all reach the model as a refusal
with signoff's reason (never an exception that ends the run, never a generic "an error
occurred"): the model can go on and tell its user why. A framework's own "always" is
never set from here: signoff's Session and Always grants live in the daemon, scoped to
the ``policy_id``, and the daemon answers the next identical call at once by itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from signoff_client.sdk import Decision, jsonable


def refusal(tool: str, decision: Decision) -> str:
    """The tool result a model reads when ``tool`` was not approved."""
    return (f"signoff did not approve {tool}: {decision.describe()}. "
            "The action was not run; do not retry it unless the user asks.")


@dataclass(frozen=True)
class ToolCall:
    """One gated call: the tool's name, its arguments (made JSON-safe) and a key that is
    this call's alone (model servers repeat call ids such as ``call_0`` across turns)."""

    tool: str
    args: dict[str, Any]
    key: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def of(cls, tool: str, args: Mapping[str, Any] | None) -> ToolCall:
        return cls(tool=tool, args={str(k): jsonable(v) for k, v in (args or {}).items()})
