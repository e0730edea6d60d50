"""What every config section is made of, for signoff's own sections and for surfaces'.

A surface brings the model of its ``[<name>]`` section with it (``signoff.adapters.slack
.settings``, or a third-party package's), and the adapters sit below `signoff.config` in
the layers: so the frozen `Section` base and `problem` / `problems` — the way a validator
names the key at fault, which `signoff.config.checks.describe_errors` turns into
``slack.app_token: required in socket mode`` — live here, at the bottom, beside the
errors. Nothing here reads a file or knows a section.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

__all__ = ["KEYED", "MULTI", "NonEmpty", "Section", "problem", "problems"]

KEYED = "signoff_config_key"
"""The error type of `problem`: its context names the sub-key at fault."""
MULTI = "signoff_config_problems"
"""The error type of `problems`: its context lists ``(key path, message)`` pairs."""

NonEmpty = Annotated[str, Field(min_length=1)]


class Section(BaseModel):
    """The base of every config section: unknown keys are errors, values are frozen."""

    # Frozen: settings are read by many components and must not be patched at runtime;
    # CLI flags produce a new copy with model_copy(update=...).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def problem(key: str, message: str) -> PydanticCustomError:
    """An error for sub-key ``key`` of the model being validated (raise it in a validator)."""
    return PydanticCustomError(KEYED, message, {"signoff_key": key})


def problems(items: list[tuple[str, str]]) -> PydanticCustomError:
    """Several ``(relative key path, message)`` problems found by one cross-check."""
    summary = "; ".join(f"{key}: {msg}" for key, msg in items)
    return PydanticCustomError(MULTI, summary, {"signoff_problems": items})
