"""Every configured MCP server of a node: a tool source for the registry and one service.

The daemon runs :meth:`McpHub.run` in its TaskGroup (cancelling it stops every server it
started); one-shot runs (`signoff handle`, `signoff tools`, the embedded Agent) use
:meth:`start` and :meth:`stop` around their work.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from signoff.runtime.tools.base import Tool
from signoff.runtime.tools.mcp.spec import McpServerSpec
from signoff.runtime.tools.names import split_mcp_name

if TYPE_CHECKING:
    from signoff.runtime.tools.mcp.connection import McpConnection


class McpHub:
    """The connections to the configured servers, by server name."""

    def __init__(self, specs: Iterable[McpServerSpec], *, log_dir: Path | None = None,
                 cwd: Path | None = None, ping_interval: float = 15.0) -> None:
        """``cwd``: where the stdio servers start (None: the daemon's working directory)."""
        specs = list(specs)
        self.connections: dict[str, McpConnection] = {}
        if specs:
            # The MCP SDK only when a server is configured: importing it is ~0.8 s of every
            # `signoff` command's start-up on a slow machine.
            from signoff.runtime.tools.mcp.connection import McpConnection

            self.connections = {s.name: McpConnection(s, log_dir=log_dir, cwd=cwd,
                                                      ping_interval=ping_interval)
                                for s in specs}
        self._task: asyncio.Task[None] | None = None

    def __bool__(self) -> bool:
        return bool(self.connections)

    # -- the registry's tool source ---------------------------------------------------
    def tools(self) -> list[Tool]:
        """Every server's tools (the last listing, or placeholders before the first)."""
        return [tool for conn in self.connections.values() for tool in conn.tools()]

    def find(self, name: str) -> Tool | None:
        """The tool ``<server>.<tool>``; None if no such server or tool."""
        parts = split_mcp_name(name)
        conn = self.connections.get(parts[0]) if parts else None
        return conn.find(parts[1]) if conn is not None and parts is not None else None

    def source_of(self, name: str) -> str | None:
        """``mcp:<server>`` for the tools of this hub."""
        parts = split_mcp_name(name)
        return f"mcp:{parts[0]}" if parts and parts[0] in self.connections else None

    def status(self) -> dict[str, str]:
        """``{"git": "up" | "starting" | "down: …"}`` for /health."""
        return {name: conn.state for name, conn in self.connections.items()}

    # -- running ----------------------------------------------------------------------
    async def run(self) -> None:
        """Keep every server up until cancelled; cancelling stops them all."""
        if not self.connections:
            return
        async with asyncio.TaskGroup() as group:
            for name, conn in self.connections.items():
                group.create_task(conn.run(), name=f"mcp-{name}")

    async def start(self, wait: float | None = None) -> None:
        """Run in the background (one-shot commands); wait for each server's first try."""
        if self._task is None and self.connections:
            self._task = asyncio.create_task(self.run(), name="mcp")
        await self.wait_tried(wait)

    async def wait_tried(self, wait: float | None = None) -> None:
        """Wait until each server came up or failed once (default: its connect timeout)."""
        await asyncio.gather(*(c.wait_tried(wait if wait is not None
                                            else c.spec.connect_timeout)
                               for c in self.connections.values()))

    async def stop(self) -> None:
        """Stop every server started by :meth:`start`."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
