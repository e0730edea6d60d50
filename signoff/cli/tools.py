"""`signoff tools`: every tool the daemon would offer, with its risk, capability and source.

The registry is built from the config file exactly as the daemon builds it (built-ins with
``policy.read_only_commands``, then plugins of the ``signoff.tools`` entry-point group),
so what this lists is what a planner, a step or an outside request can name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from signoff.runtime.tools.registry import ToolRegistry, builtin_registry

out = Console(highlight=False, soft_wrap=True)


def registry_for(config: Path | None) -> ToolRegistry:
    """The registry of the daemon configured by ``config`` (the defaults without one)."""
    from signoff.cli.main import load

    settings = load(config)
    return builtin_registry(read_only_commands=settings.policy.read_only_commands,
                            work_dir=settings.resolved_work_dir(None))


def cmd_tools(
    config: Annotated[Path | None, typer.Option("--config", "-c", envvar="SIGNOFF_CONFIG",
                                                help="TOML config file (default: built-in).")
                      ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """List every tool: name, risk, capability and source (builtin, plugin, mcp:<server>)."""
    tools = registry_for(config).listing()
    if as_json:
        typer.echo(json.dumps([t.public() for t in tools], indent=2))
        return
    table = Table()
    for column in ("Tool", "Risk", "Capability", "Source"):
        table.add_column(column, overflow="fold")
    for t in tools:
        table.add_row(t.name, t.risk.value, t.capability, t.source)
    out.print(table)


def register(app: typer.Typer) -> None:
    """Add `signoff tools` to the CLI."""
    app.command("tools")(cmd_tools)
