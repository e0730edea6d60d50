"""The face for plug-in authors: everything a surface or a tool package imports from signoff.

``from signoff.plugin import Surface, SurfacePlugin, Section, Tool, Param, ToolContext``.
A surface implements `Surface` and is offered with a `SurfacePlugin` under the
``signoff.surfaces`` entry points; a tool is any object shaped like `Tool`, offered under
``signoff.tools`` (see docs/extending.md). Names here stay stable; what is not here is
signoff's inside and may move.
"""

from __future__ import annotations

from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    DecisionOutcome,
    Route,
    Surface,
    SurfaceDeps,
    SurfacePlugin,
)
from signoff.errors import (
    BadArguments,
    PlatformError,
    PlatformRejected,
    PlatformUnavailable,
    RateLimited,
    ToolError,
)
from signoff.runtime.models import RiskClass, Scope
from signoff.runtime.tools.base import Param, Preview, PreviewTool, Tool, ToolContext
from signoff.sections import NonEmpty, Section, problem

__all__ = [
    "Actor",
    "ApprovalCard",
    "BadArguments",
    "CardRef",
    "DecisionEvent",
    "DecisionHandler",
    "DecisionOutcome",
    "NonEmpty",
    "Param",
    "PlatformError",
    "PlatformRejected",
    "PlatformUnavailable",
    "Preview",
    "PreviewTool",
    "RateLimited",
    "RiskClass",
    "Route",
    "Scope",
    "Section",
    "Surface",
    "SurfaceDeps",
    "SurfacePlugin",
    "Tool",
    "ToolContext",
    "ToolError",
    "problem",
]
