"""Config sections for tools from MCP servers: ``[[mcp.servers]]`` and their tool rules.

Also the check behind `signoff config check` that a stdio server's command can start:
its executable is looked up on PATH (the server's own ``env`` PATH if it sets one), the
way the process would be spawned, without starting anything.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated, Any, Self

from pydantic import AfterValidator, Field, model_validator

from signoff.config.checks import NonEmpty, PositiveDuration, Risk, problem, problems
from signoff.config.fields import Section
from signoff.runtime.models import RiskClass

# A dot separates server and tool in tool names, and "__" stands for it in the names a
# model sees: neither may appear in a server's name.
_SERVER_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*")


def _check_server_name(value: str) -> str:
    if not _SERVER_NAME.fullmatch(value) or value.endswith("_"):
        raise ValueError(f"invalid server name {value!r} (letters, digits, '-' and single '_'; "
                         "tools are named '<server>.<tool>')")
    return value


def _valid_name(value: str) -> bool:
    try:
        _check_server_name(value)
    except ValueError:
        return False
    return True


def _check_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return value


class McpToolSettings(Section):
    """``[mcp.servers.tools.<tool>]``: how one tool of the server is labelled."""

    risk: Risk | None = None  # None: the server's default_risk
    capability: NonEmpty | None = None  # None: "mcp.<server>"
    targets: list[NonEmpty] = []  # arguments whose values are what the call touches
    content: list[NonEmpty] = []  # arguments left out of the fingerprint

    @model_validator(mode="after")
    def _disjoint(self) -> Self:
        both = sorted(set(self.targets) & set(self.content))
        if both:
            raise problem("content", f"{', '.join(both)} cannot be a target and content "
                          "(a target is always part of the fingerprint)")
        return self


class McpServerSettings(Section):
    """``[[mcp.servers]]``: one MCP server whose tools the agent may use."""

    name: Annotated[str, AfterValidator(_check_server_name)]
    command: list[NonEmpty] | None = Field(default=None, min_length=1)  # stdio: argv
    url: Annotated[str, AfterValidator(_check_url)] | None = None  # streamable HTTP
    env: dict[str, str] = {}
    default_risk: Risk = RiskClass.DESTRUCTIVE
    trust_annotations: bool = False
    timeout: PositiveDuration = timedelta(seconds=60)  # one tools/call
    connect_timeout: PositiveDuration = timedelta(seconds=20)  # start + tools/list
    tools: dict[str, McpToolSettings] = {}

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if self.command is None and self.url is None:
            raise problem("command", 'give command = ["program", "arg", ...] (stdio) or url')
        if self.command is not None and self.url is not None:
            raise problem("url", "give either command (stdio) or url (HTTP), not both")
        if self.url is not None and self.env:
            raise problem("env", "only a stdio server (command) gets an environment")
        return self


class McpSettings(Section):
    """``[mcp]``: the MCP servers."""

    servers: list[McpServerSettings] = []

    @model_validator(mode="after")
    def _unique(self) -> Self:
        seen: list[str] = []
        found = []
        for i, server in enumerate(self.servers):
            if server.name in seen:
                found.append((f"servers[{i}].name", f"duplicate server name {server.name!r}"))
            seen.append(server.name)
        if found:
            raise problems(found)
        return self


def command_problem(server: McpServerSettings) -> str | None:
    """Why the server's command cannot start (its executable is not found), or None."""
    if not server.command:
        return None
    program = server.command[0]
    path = server.env.get("PATH", os.environ.get("PATH", os.defpath))
    if os.sep in program:
        if not os.path.isfile(program):
            return f"cannot start {program!r}: no such file"
        if not os.access(program, os.X_OK):
            return f"cannot start {program!r}: not executable"
        return None
    if shutil.which(program, path=path) is None:
        return f"cannot start {program!r}: not found on PATH"
    return None


def describe_server(server: McpServerSettings) -> str:
    """One line for `signoff config check`: how the server is reached."""
    if server.url:
        return f"{server.name} (http {server.url}; not contacted)"
    assert server.command is not None
    program = server.command[0]
    path = server.env.get("PATH", os.environ.get("PATH", os.defpath))
    found = program if os.sep in program else shutil.which(program, path=path)
    return f"{server.name} (stdio {program} -> {found}; found, not started)"


_SERVER_KEY = re.compile(r"mcp\.servers\[(\d+)\]")


def server_names(data: Any) -> list[str | None]:
    """The ``name`` of each ``[[mcp.servers]]`` of a parsed file (None where it has none)."""
    servers = data.get("mcp", {}).get("servers", []) if isinstance(data, dict) else []
    if not isinstance(servers, list):
        return []
    names = [s.get("name") if isinstance(s, dict) else None for s in servers]
    return [n if isinstance(n, str) and n else None for n in names]


def server_key(key: str, names: Sequence[str | None]) -> str:
    """``mcp.servers[1].url`` → ``mcp.servers['git'].url``: every error about a server
    names it by its ``name``; the index stays only when the name is missing or repeated."""
    found = _SERVER_KEY.match(key)
    if found is None:
        return key
    i = int(found.group(1))
    name = names[i] if i < len(names) else None
    if name is None or names.count(name) > 1 or not _valid_name(name):
        return key  # a missing, repeated or invalid name would not tell the server apart
    return f"mcp.servers[{name!r}]{key[found.end():]}"
