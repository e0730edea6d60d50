"""Tool names as a model sees them: OpenAI function names match ``^[a-zA-Z0-9_-]{1,64}$``.

Registry names may hold dots (MCP tools are ``<server>.<tool>``); the model is given
``<server>__<tool>``. `model_name` is the one mapping; `ModelTools` keeps the way back
(a table, not a reverse string rule, so a name the model invents is simply unknown).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")
MAX_NAME = 64


def model_name(tool: str) -> str:
    """The function name the model uses for registry tool ``tool``."""
    return _NOT_ALLOWED.sub("_", tool.replace(".", "__"))[:MAX_NAME] or "_"


class ModelTools:
    """The function schemas a model is offered, and its names mapped back to the registry."""

    def __init__(self, schemas: Iterable[dict[str, Any]]) -> None:
        self.schemas: list[dict[str, Any]] = []
        self._tools: dict[str, str] = {}
        for schema in schemas:
            fn = dict(schema.get("function") or {})
            tool = str(fn.get("name", ""))
            name = model_name(tool)
            if name in self._tools:
                continue  # two registry names that map alike: the first one keeps it
            self._tools[name] = tool
            self.schemas.append({**schema, "function": {**fn, "name": name}})

    def tool(self, name: str) -> str | None:
        """The registry name for a model's function name, or None if none is offered."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """The function names offered, sorted."""
        return sorted(self._tools)
