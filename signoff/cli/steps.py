"""Steps files for `signoff handle --steps`: JSON or TOML lists of tool calls.

JSON: ``[{"tool": "...", "args": {...}}, ...]`` or ``{"steps": [...]}``.
TOML: ``[[steps]]`` tables with ``tool`` and ``args``.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from signoff.errors import BadArguments
from signoff.runtime.models import Action


def parse_steps(data: Any, *, source: str) -> list[Action]:
    """Actions from decoded JSON/TOML; errors name the source and the step."""
    if isinstance(data, dict):
        if "steps" not in data:
            raise BadArguments(f"{source}: expected a list of steps or a 'steps' key")
        data = data["steps"]
    if not isinstance(data, list) or not data:
        raise BadArguments(f"{source}: expected a non-empty list of steps")
    actions = []
    for i, step in enumerate(data):
        if not isinstance(step, dict):
            raise BadArguments(f"{source}: steps[{i}] must be a table/object")
        tool, args = step.get("tool"), step.get("args", {})
        if not isinstance(tool, str) or not tool:
            raise BadArguments(f"{source}: steps[{i}].tool must be a tool name")
        if not isinstance(args, dict):
            raise BadArguments(f"{source}: steps[{i}].args must be a table/object")
        unknown = set(step) - {"tool", "args"}
        if unknown:
            raise BadArguments(f"{source}: steps[{i}]: unknown key(s) {', '.join(sorted(unknown))}")
        actions.append(Action(tool=tool, args=args))
    return actions


def load_steps(path: Path) -> list[Action]:
    """Read a .json or .toml steps file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadArguments(f"{path}: cannot read steps file: {exc.strerror}") from exc
    try:
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadArguments(f"{path}: invalid TOML: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise BadArguments(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: "
                           f"{exc.msg}") from exc
    return parse_steps(data, source=str(path))
