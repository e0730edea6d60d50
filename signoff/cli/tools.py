"""`signoff tools`: every tool the agent may use, with its risk, capability and source.

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

from signoff.cli.main import ConfigOpt, fail, load, setup_logging
from signoff.errors import SignoffError


def tool_rows(config: Any, work_dir: Path | None = None) -> tuple[list[dict[str, str]],
                                                                  dict[str, str]]:
    """``[{"name", "risk", "capability", "source"}]`` sorted by name, and the MCP status."""
    from signoff.wiring import build_tools

    async def collect() -> tuple[list[dict[str, str]], dict[str, str]]:
        registry, hub = build_tools(config, config.resolved_work_dir(work_dir))
        await hub.start()
        try:
            rows = [{"name": name, "risk": registry.listed_risk(name).value,
                     "capability": registry.get(name).capability,
                     "source": registry.source_of(name)} for name in registry.names()]
            return rows, hub.status()
        finally:
            await hub.stop()

    return asyncio.run(collect())


def register(app: typer.Typer) -> None:
    """Add the `tools` command to ``app``."""
    @app.command("tools")
    def tools(
        config: ConfigOpt = None,
        as_json: Annotated[bool, typer.Option("--json", help="A JSON list.")] = False,
        work_dir: Annotated[Path | None, typer.Option(
            help="Work dir (where MCP servers' logs go).")] = None,
    ) -> None:
        """List every tool: name, risk, capability and source (builtin, plugin, mcp:<server>)."""
        setup_logging("ERROR")  # a server that is down is reported below, once
        settings = load(config)
        try:
            rows, status = tool_rows(settings, work_dir)
        except SignoffError as exc:
            fail(str(exc))
        for server, state in status.items():
            if state != "up":
                typer.secho(f"warning: MCP server {server} is {state}", err=True,
                            fg=typer.colors.YELLOW)
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        widths = {key: max([len(key), *(len(r[key]) for r in rows)]) for key in rows[0]} \
            if rows else {}
        for row in rows:
            typer.echo("  ".join(row[k].ljust(widths[k]) for k in row).rstrip())
