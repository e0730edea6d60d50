"""What the runtime knows of one configured MCP server: plain, frozen data.

The wiring builds these from ``[[mcp.servers]]``; the runtime never reads the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from signoff.runtime.models import RiskClass


@dataclass(frozen=True)
class McpToolRule:
    """``[mcp.servers.tools.<name>]``: how signoff labels one tool of the server."""

    risk: RiskClass | None = None  # None: default_risk (or READ from a trusted read-only hint)
    capability: str | None = None  # None: "mcp.<server>"
    targets: tuple[str, ...] = ()  # arguments whose values are what the call touches
    content: tuple[str, ...] = ()  # arguments left out of the fingerprint (message text)


@dataclass(frozen=True)
class McpServerSpec:
    """One server: how to reach it and how to label its tools.

    Exactly one of ``command`` (stdio: the argv of the server process) and ``url``
    (streamable HTTP endpoint) is set.
    """

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    default_risk: RiskClass = RiskClass.DESTRUCTIVE
    trust_annotations: bool = False
    tools: Mapping[str, McpToolRule] = field(default_factory=dict)
    call_timeout: float = 60.0  # seconds one tools/call may take
    connect_timeout: float = 20.0  # seconds to start the server and list its tools

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r}: give either command or url")

    @property
    def capability(self) -> str:
        """The default capability of the server's tools."""
        return f"mcp.{self.name}"

    @property
    def transport(self) -> str:
        """``stdio`` or ``http`` (for messages and `signoff tools`)."""
        return "stdio" if self.command else "http"

    def rule(self, tool: str) -> McpToolRule | None:
        """The configured rule of ``tool``, None when the tool is not listed."""
        return self.tools.get(tool)
