"""CLI commands for schedules and on-call: they read the config and the daemon's database.

    signoff schedules [--at TIME] [--config PATH] [--json]   next fire times, last run, outcome
    signoff schedules run NAME [--config PATH]      queue a run now; prints the task id
    signoff oncall [--at TIME] [--config PATH] [--json]   who is on call, until when

They need no running daemon: a run queued here lands in the database the daemon uses and
its worker picks it up. ``cli.py`` calls `register(app, load_node=...)`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar
from zoneinfo import ZoneInfo

import typer
from rich.console import Console

from signoff.bot.routing.oncall import (
    OnCallRouter,
    Rotation,
    escalation_chain,
    who_is_on_call,
)
from signoff.cli.app import ConfigOpt, fail
from signoff.cli.tables import Col, Grid
from signoff.errors import ConfigError, SignoffError
from signoff.runtime.clock import system_now
from signoff.runtime.models import Task
from signoff.runtime.schedule.durations import format_duration, parse_duration
from signoff.runtime.schedule.scheduler import Scheduler

__all__ = ["parse_at", "register"]

T = TypeVar("T")
NodeLoader = Callable[[str | None], Any]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
AtOpt = Annotated[str | None, typer.Option(
    "--at", help="When: ISO 8601 ('2026-12-24T09:00', local time unless an offset is "
                 "given), 'now', or '+DURATION' such as '+2h'.")]
_FMT = "%a %d %b %Y %H:%M %Z"
_SHORT = "%a %d %b %H:%M %Z"


def parse_at(text: str | None, now: datetime) -> datetime:
    """``--at``: None/'now', '+2h' (from now) or ISO 8601 (naive means local time)."""
    if text is None or text.strip().lower() == "now":
        return now
    value = text.strip()
    if value.startswith("+"):
        return now + parse_duration(value[1:])
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"invalid time {text!r} (use e.g. '2026-12-24T09:00', 'now' "
                         "or '+2h')") from None
    return (when if when.tzinfo else when.astimezone()).astimezone(UTC)


def _load(load_node: NodeLoader, config: Path | None) -> Any:
    try:
        return load_node(str(config) if config else None)
    except ConfigError as exc:
        fail(str(exc))


def _run(node: Any, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``work`` with the node's store open; store and config errors exit cleanly."""

    async def main() -> T:
        await node.store.open()
        try:
            return await work()
        finally:
            await node.store.close()

    try:
        return asyncio.run(main())
    except ConfigError as exc:
        fail(str(exc))
    except SignoffError as exc:
        fail(str(exc), code=1)


async def _queue(node: Any, scheduler: Scheduler, name: str) -> Task:
    """Queue a run now and write its "queued" team line before this process ends: the
    notifier holds lines a few seconds to fold bursts, and nothing of this process is
    left to write them later (the daemon's outbox delivers them)."""
    task = await scheduler.run_now(name, submitted_by="cli")
    if node.flow.notifier is not None:
        await node.flow.notifier.flush(force=True)
    return task


def _local(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone().strftime(_SHORT)


def _zoned(iso: str, zone: str) -> str:
    # Through ZoneInfo, so the abbreviation reads "CET", not "UTC+01:00".
    return datetime.fromisoformat(iso).astimezone(ZoneInfo(zone)).strftime(_SHORT)


def _next_times(row: dict[str, Any]) -> str:
    """Fire times in the schedule's zone, with the local time too where it differs."""
    if not row["enabled"]:
        return "disabled"
    lines = []
    for t in row["next_utc"]:
        zoned, local = _zoned(t, row["timezone"]), _local(t)
        if zoned != local:  # the same day needs only the local time of day
            same_day = zoned[:10] == local[:10]
            zoned += f" ({local[11:] if same_day else local} here)"
        lines.append(zoned)
    return "\n".join(lines) or "never"


def _schedules_table(rows: list[dict[str, Any]]) -> Grid:
    """Schedules as a table: names, modes, task ids and outcomes stay whole (80 columns)."""
    grid = Grid(Col("Schedule"), Col("When", whole=False), Col("Mode"),
                Col("Next", whole=False), Col("Last run"), Col("Outcome"))
    for row in rows:
        when = f"{row['cron'] or 'every ' + str(row['every'])}\n{row['timezone']}"
        last = row.get("last_run")
        ran = f"{last['task_id']}\n{_local(last['created_at'])}" if last else "never"
        grid.add(row["name"], when, row["cron_mode"], _next_times(row), ran,
                 last["outcome"] if last else "")
    return grid


def register(app: typer.Typer, *, load_node: NodeLoader) -> None:
    """Add ``schedules``, ``schedules run`` and ``oncall`` to ``app``."""
    schedules_app = typer.Typer(help="List the schedules (next runs, last outcome) or run one now.")

    @schedules_app.callback(invoke_without_command=True)
    def schedules(ctx: typer.Context, config: ConfigOpt = None, as_json: JsonOpt = False,
                  at: AtOpt = None) -> None:
        """List schedules: next fire times (local and schedule time zone), last run."""
        ctx.obj = config
        if ctx.invoked_subcommand is not None:
            return
        try:
            when = parse_at(at, system_now())
        except ValueError as exc:
            fail(str(exc))
        node = _load(load_node, config)
        scheduler = Scheduler(engine=node.engine, clock=node.clock,
                              schedules=[s.to_runtime() for s in node.settings.schedules])
        rows = _run(node, lambda: scheduler.status(when))
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
        elif not rows:
            typer.echo("no schedules configured")
        else:
            _schedules_table(rows).print(Console(highlight=False, soft_wrap=True))

    @schedules_app.command("run")
    def run_now(ctx: typer.Context,
                name: Annotated[str, typer.Argument(help="The schedule's name.")],
                config: ConfigOpt = None) -> None:
        """Queue a run of schedule NAME now (the daemon's worker runs it); print its id."""
        node = _load(load_node, config or ctx.obj)
        scheduler = Scheduler(engine=node.engine, clock=node.clock,
                              schedules=[s.to_runtime() for s in node.settings.schedules])
        if name not in scheduler.schedules:
            known = ", ".join(scheduler.schedules) or "none"
            fail(f"no schedule named {name!r} (known: {known})")
        task = _run(node, lambda: _queue(node, scheduler, name))
        typer.echo(task.id)

    app.add_typer(schedules_app, name="schedules")

    @app.command("oncall")
    def oncall(at: AtOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
        """Show who is on call (now or at --at), from which rotation, until when."""
        node = _load(load_node, config)
        try:
            when = parse_at(at, system_now())
        except ValueError as exc:
            fail(str(exc))
        rotations = [r.to_runtime() for r in node.settings.oncall.rotations]
        overrides = [o.to_runtime() for o in node.settings.oncall.overrides]
        if as_json:  # the same body as GET /oncall
            router = OnCallRouter(rotations=rotations, overrides=overrides, clock=node.clock)
            typer.echo(json.dumps(router.describe(when), indent=2))
            return
        shifts = who_is_on_call(rotations, overrides, when)
        nexts: dict[str, Rotation | None] = {}
        for rot in rotations:
            chain = escalation_chain(rotations, rot.name)
            nexts[rot.name] = chain[1] if len(chain) > 1 else None
        if not shifts:
            typer.echo("no on-call rotations configured")
            return
        grid = Grid(Col("Rotation"), Col("On call"), Col("Since", whole=False),
                    Col("Until", whole=False), Col("Via"), Col("Escalates to", whole=False),
                    title=f"On call at {when.astimezone().strftime(_FMT)}")
        by_name = {r.name: r for r in rotations}
        for shift in shifts:
            rot = by_name[shift.rotation]
            zone = rot.zone
            target = nexts[shift.rotation]
            escalates = (f"{target.name} after {format_duration(rot.escalate_after)}"
                         if target is not None and rot.escalate_after else "")
            grid.add(shift.rotation, shift.member, shift.since.astimezone(zone).strftime(_SHORT),
                     shift.until.astimezone(zone).strftime(_SHORT),
                     "override" if shift.override else "rotation", escalates)
        grid.print(Console(highlight=False, soft_wrap=True))
