"""`signoff tools`: every tool the daemon would offer, with its risk, capability and source.

The registry is built from the config file exactly as the daemon builds it (built-ins with
``policy.read_only_commands``, plugins of the ``signoff.tools`` entry-point group, then the
``[[mcp.servers]]``), so what this lists is what a planner, a step or a request can name.
MCP servers are started for the listing (each waits at most its connect timeout) and
stopped again; a server that does not come up is reported on stderr and its configured
tools are still listed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from signoff.cli.app import ConfigOpt, fail, load, setup_logging
from signoff.cli.tables import Col, Grid
from signoff.errors import SignoffError
from signoff.runtime.tools.registry import ToolInfo


def listing(settings: Any, work_dir: Path | None = None) -> tuple[list[ToolInfo],
                                                                 dict[str, str]]:
    """Every tool of the configured node, and each MCP server's state while listing."""
    from signoff.wiring import build_tools

    async def collect() -> tuple[list[ToolInfo], dict[str, str]]:
        registry, hub = build_tools(settings, settings.resolved_work_dir(work_dir))
        await hub.start()
        try:
            return registry.listing(), hub.status()
        finally:
            await hub.stop()

    return asyncio.run(collect())


def cmd_tools(
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
    work_dir: Annotated[Path | None, typer.Option(
        help="Work dir (where MCP servers' logs go).")] = None,
) -> None:
    """List every tool: name, risk, capability and source (builtin, plugin, mcp:<server>)."""
    setup_logging("ERROR")  # a server that is down is reported below, once
    settings = load(config, chat=False)
    try:
        tools, status = listing(settings, work_dir)
    except SignoffError as exc:
        fail(str(exc))
    for server, state in status.items():
        if state != "up":
            typer.secho(f"warning: MCP server {server} is {state}", err=True,
                        fg=typer.colors.YELLOW)
    if as_json:
        typer.echo(json.dumps([t.public() for t in tools], indent=2))
        return
    grid = Grid(Col("Tool"), Col("Risk"), Col("Capability"), Col("Source", whole=False))
    for t in tools:
        grid.add(t.name, t.risk.value, t.capability, t.source)
    grid.print(Console(highlight=False, soft_wrap=True))  # reads COLUMNS now


def register(app: typer.Typer) -> None:
    """Add `signoff tools` to the CLI."""
    app.command("tools")(cmd_tools)
