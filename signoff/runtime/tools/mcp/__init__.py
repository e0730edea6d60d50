"""Tools from MCP servers: the configured servers' tools, labelled and gated like built-ins.

`McpServerSpec` (plain data built by the wiring from ``[[mcp.servers]]``), `McpHub` (the
connections: a tool source for the registry and a service of the daemon), `McpTool`;
`connection.McpConnection` (one server, on the MCP SDK) is imported only by a hub that
has servers, so a node without any never loads the SDK.
"""

from __future__ import annotations

from signoff.runtime.tools.mcp.hub import McpHub
from signoff.runtime.tools.mcp.spec import McpServerSpec, McpToolRule
from signoff.runtime.tools.mcp.tool import ListedTool, McpTool

__all__ = ["ListedTool", "McpHub", "McpServerSpec", "McpTool", "McpToolRule"]
