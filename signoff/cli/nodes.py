"""`signoff nodes`: the live daemons sharing the configured database.

Reads the node registry directly (like `signoff audit`), so it works with or without a
daemon on this host. "Live" is decided with this process's clock against each node's own
``live_until`` (see `signoff.runtime.nodes`).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from signoff.cli.tables import Col, Grid
from signoff.config.settings import Settings
from signoff.runtime.clock import system_now
from signoff.runtime.store.factory import make_store


async def run_nodes(settings: Settings, *, as_json: bool, work_dir: Path | None,
                    database: str | None) -> int:
    """Print the live nodes; return the exit code."""
    store = make_store(database or settings.database_url(work_dir))
    await store.open()
    try:
        nodes = await store.live_nodes(system_now())
    finally:
        await store.close()
    if as_json:
        typer.echo(json.dumps([n.public() for n in nodes], indent=2))
        return 0
    if not nodes:
        typer.echo("no live nodes")
        return 0
    grid = Grid(Col("Node"), Col("Host", whole=False), Col("Started"), Col("Last beat"),
                Col("Running"))
    for n in nodes:
        grid.add(n.id, n.host, n.started_at.isoformat()[:19], n.last_beat.isoformat()[:19],
                 str(n.running))
    grid.print(Console(highlight=False))
    return 0
