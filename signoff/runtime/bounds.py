"""How deep and how large JSON from outside may be: one rule for every intake.

Every record is stored as JSON text and read back with pydantic, whose parser stops at a
couple of hundred levels of nesting. A payload accepted deeper than that could be written
but never read again: the worker, the sweep and the pending list failed on it for good.
So JSON that comes in — API bodies (`GuardMiddleware`), explicit steps and the args of
outside requests, the tool calls of a model (agent and plan mode), the tool calls an MCP
client sends through ``mcp-gate`` — is refused when it nests deeper than `MAX_DEPTH`
levels of objects and arrays (the outermost one is level 1) or is larger than
`MAX_BYTES`. The error names the field, which a model sees as a tool error and an API
caller as a 422.
"""

from __future__ import annotations

import json
from typing import Any

from signoff.errors import BadArguments

MAX_DEPTH = 32
MAX_BYTES = 1024 * 1024  # 1 MiB, the API's body limit too
_PATH_PARTS = 3  # how much of a too-deep path an error shows
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels (the limit for JSON)"
TOO_LARGE = f"larger than {MAX_BYTES} bytes (the limit for JSON)"

# A step on the way down: (key or index, the step above it); None is the root.
_Step = tuple[str | int, "_Step | None"] | None


class OutOfBounds(BadArguments):
    """JSON nested too deep or too large; ``field`` names where."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def too_deep_at(value: object, limit: int = MAX_DEPTH) -> tuple[str | int, ...] | None:
    """The path to the first object or array nested deeper than ``limit`` (``()`` when
    that is the value itself), or None when ``value`` is within it.

    Iterative, so any depth is measured without recursion, and it stops at the first
    place too deep: the cost is bounded by the size of what is within the limit.
    """
    stack: list[tuple[object, int, _Step]] = [(value, 1, None)]
    while stack:
        item, depth, step = stack.pop()
        children: Any
        if isinstance(item, dict):
            children = item.items()
        elif isinstance(item, list | tuple):
            children = enumerate(item)
        else:
            continue
        if depth > limit:
            return _path(step)
        for key, child in children:
            if isinstance(child, dict | list | tuple):
                stack.append((child, depth + 1, (key, step)))
    return None


def _path(step: _Step) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    while step is not None:
        parts.append(step[0])
        step = step[1]
    return tuple(reversed(parts))


def field_of(base: str, path: tuple[str | int, ...]) -> str:
    """``base`` followed by the first parts of ``path``: ``args.a[0].b…``."""
    out = base
    for part in path[:_PATH_PARTS]:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    if len(path) > _PATH_PARTS:
        out += "…"
    return out or "body"


def check_json(value: object, field: str) -> None:
    """`OutOfBounds` naming the place when ``value`` nests deeper than `MAX_DEPTH`."""
    path = too_deep_at(value)
    if path is not None:
        raise OutOfBounds(field_of(field, path), TOO_DEEP)


def parse_json(text: str | bytes, field: str) -> Any:
    """``text`` parsed, within `MAX_BYTES` and `MAX_DEPTH` (`OutOfBounds` otherwise);
    malformed JSON raises `json.JSONDecodeError` as `json.loads` does."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "replace"))
    if size > MAX_BYTES:
        raise OutOfBounds(field_of(field, ()), TOO_LARGE)
    try:
        value = json.loads(text)
    except RecursionError:  # nested beyond what the parser recurses through: far too deep
        raise OutOfBounds(field_of(field, ()), TOO_DEEP) from None
    check_json(value, field)
    return value
