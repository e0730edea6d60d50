"""The error tree of signoff: one root, retryable failures apart from final ones.

A refused decision is not an exception: it is an answer (`DecisionResult` with a code),
since the caller always has to tell the person something.

    SignoffError
    ├── ConfigError            bad or missing configuration (final)
    ├── StoreError             the database could not be reached or answered oddly
    │   ├── Conflict           a compare-and-set lost: someone else changed the row first
    │   └── StoreUnavailable   retryable: connection lost, failover, read-only, locked
    │       └── StoreFull      retryable: the disk (or the database) is full
    ├── ToolError              a tool could not run or failed (the action fails)
    │   ├── UnknownTool
    │   ├── BadArguments
    │   ├── PathEscape         a path left the work dir
    │   └── ToolUnavailable    the tool's MCP server is down or starting
    ├── PlannerError           the planner could not produce actions
    └── PlatformError          a chat platform call failed
        ├── PlatformUnavailable  retryable: 5xx, timeouts, connection refused
        ├── RateLimited          retryable after ``retry_after`` seconds
        └── PlatformRejected     final: bad token, missing scope, bot removed from chat
"""

from __future__ import annotations


class SignoffError(Exception):
    """Something went wrong in signoff."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__class__.__doc__ or "").strip())


class ConfigError(SignoffError):
    """The configuration is invalid."""


class StoreError(SignoffError):
    """The task store failed."""


class Conflict(StoreError):
    """Another writer changed the record first."""


class StoreUnavailable(StoreError):
    """The database is unavailable for now; try again."""

    reason = "database_unavailable"  # the JSON reason an API answer gives


class StoreFull(StoreUnavailable):
    """The database cannot write: the disk is full; try again when space is freed."""

    reason = "disk_full"


class StoreReadOnly(StoreUnavailable):
    """The database cannot write: its file system or server is read-only for now."""

    reason = "read_only"


class ToolError(SignoffError):
    """The tool failed."""


class UnknownTool(ToolError):
    """No tool of that name is registered."""


class BadArguments(ToolError):
    """The tool's arguments are missing or of the wrong type."""


class PathEscape(ToolError):
    """The path leaves the work directory."""


class ToolUnavailable(ToolError):
    """The tool's server is not running."""


class PlannerError(SignoffError):
    """The planner could not plan the goal."""

    def __init__(self, message: str | None = None, *,
                 planner: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.planner = planner  # how planning was attempted (a fallback), for result.planner


class PlatformError(SignoffError):
    """A chat platform call failed."""


class PlatformUnavailable(PlatformError):
    """The chat platform is unreachable for now."""


class RateLimited(PlatformError):
    """The chat platform asked us to slow down."""

    def __init__(self, message: str | None = None, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PlatformRejected(PlatformError):
    """The chat platform refused the call for good."""
