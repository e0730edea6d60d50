"""Tool names as a model sees them: the one mapping between registry and function names.

The registry names MCP tools ``<server>.<tool>`` (steps, prohibits, budgets, grants and
cards use that spelling), but OpenAI-compatible function names must match
``^[a-zA-Z0-9_-]{1,64}$``: no dots. A model therefore sees ``<server>__<tool>``. Built-in
names (``read_file``) are valid function names already and map to themselves.

The mapping is one-way by construction (a character the model may not see becomes ``_``,
long names are cut); going back is a lookup among the registered names, done by
:meth:`signoff.runtime.tools.registry.ToolRegistry.resolve`, which refuses two tools that
would look the same to a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

SERVER_SEPARATOR = "."  # between server and tool in registry names
LLM_SEPARATOR = "__"  # what the model sees in its place
LLM_NAME_MAX = 64
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")
LLM_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# What MCP allows a tool's name to be (the spec's "Tool names": 1-128 of these). A server
# names its tools itself, and the name is on every card, log line and grant as it is: one
# with spaces could write "server hints: … (trusted server)" into a card's title, one
# with a zero-width space reads as another tool's.
MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def allowed_mcp_tool(name: str) -> bool:
    """True when a server's tool name is one MCP allows (`MCP_TOOL_NAME`)."""
    return MCP_TOOL_NAME.fullmatch(name) is not None


def mcp_tool_name(server: str, tool: str) -> str:
    """The registry name of ``tool`` on MCP server ``server``: ``git.git_status``."""
    return f"{server}{SERVER_SEPARATOR}{tool}"


def split_mcp_name(name: str) -> tuple[str, str] | None:
    """``("git", "git_status")`` for ``"git.git_status"``; None for a name without a server."""
    server, sep, tool = name.partition(SERVER_SEPARATOR)
    return (server, tool) if sep and server and tool else None


def llm_name(name: str) -> str:
    """The function name a model sees for registry name ``name`` (``git__git_status``)."""
    text = name.replace(SERVER_SEPARATOR, LLM_SEPARATOR, 1)
    return _NOT_ALLOWED.sub("_", text)[:LLM_NAME_MAX] or "_"


class ModelTools:
    """The function schemas a model is offered, and its names mapped back to the registry
    (a table, not a reverse string rule, so a name the model invents is simply unknown)."""

    def __init__(self, schemas: Iterable[dict[str, Any]]) -> None:
        self.schemas: list[dict[str, Any]] = []
        self._tools: dict[str, str] = {}
        for schema in schemas:
            fn = dict(schema.get("function") or {})
            tool = str(fn.get("name", ""))
            name = llm_name(tool)
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
