"""`signoff stats` and `signoff suggest`: what the audit log teaches.

    signoff stats [--since 30d] [--json]      time to decide (p50/p90) per approver,
                                              surface, tool and risk; expiries; how often
                                              each exact action was approved
    signoff suggest [--min 5] [--for 7d] [--json]
                                              exact actions approved N times in a row and
                                              never denied, as a grant or a policy line

Both read the daemon's database like `signoff audit` and change nothing: a suggestion is
applied only by a person (approving with a time box, or editing the policy).
``--since`` is a duration back from now or an ISO date (`signoff.runtime.record`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from signoff.cli.app import ConfigOpt, DatabaseOpt, WorkDirOpt, fail
from signoff.cli.audit import open_store
from signoff.cli.receipts import settings_of
from signoff.config.settings import Settings
from signoff.errors import SignoffError
from signoff.runtime import record
from signoff.runtime.clock import system_now
from signoff.runtime.models import AuditEvent


async def _events(settings: Settings, work_dir: Path | None, database: str | None
                  ) -> list[AuditEvent]:
    store = await open_store(settings, work_dir=work_dir, database=database)
    try:
        return await record.read_log(store)
    finally:
        await store.close()


def _ms(value: float) -> str:
    return f"{value / 1000:.1f}s" if value >= 1000 else f"{value:.0f}ms"


def stats_lines(result: record.Stats) -> list[str]:
    """The plain-text report."""
    lines = [f"decisions {result.since:%Y-%m-%d %H:%M} – {result.until:%Y-%m-%d %H:%M} UTC: "
             f"{result.decisions} ({result.approved} approved, {result.denied} denied), "
             f"{result.expired} expired"]
    for dim, groups in result.time_to_decide.items():
        if groups:
            lines.append(f"time to decide by {dim} (p50 / p90, n):")
            lines.extend(f"  {key:<28} {_ms(t.p50_ms):>7} / {_ms(t.p90_ms):>7}  {t.count}"
                         for key, t in groups.items())
    if result.actions:
        lines.append("exact actions (approved / denied / expired):")
        for a in result.actions[:20]:
            what = f"{a.tool} → {', '.join(a.targets)}" if a.targets else a.tool
            lines.append(f"  {a.fingerprint[:12]}  {what[:48]:<48} "
                         f"{a.approved} / {a.denied} / {a.expired}")
    return lines


def suggestion_lines(found: list[record.Suggestion], streak: int) -> list[str]:
    """The plain-text suggestions."""
    if not found:
        return [f"no suggestions: no exact action was approved {streak} times in a row "
                "without ever being denied"]
    lines = []
    for s in found:
        a = s.action
        what = f"{a.tool} → {', '.join(a.targets)}" if a.targets else a.tool
        lines += [f"{what} ({a.risk or '-'}, {a.fingerprint[:12]}): approved "
                  f"{a.streak} times in a row, never denied",
                  f"  grant:  {s.grant}", f"  policy: {s.policy}"]
    lines.append("nothing was changed: a person applies a suggestion, or not")
    return lines


def register(app: typer.Typer) -> None:
    """Add `stats` and `suggest` to the CLI."""
    app.command("stats")(stats)
    app.command("suggest")(suggest)


def stats(
    since: Annotated[str, typer.Option(help="A duration back from now (30d) or a date.")
                     ] = "30d",
    as_json: Annotated[bool, typer.Option("--json", help="JSON.")] = False,
    config: ConfigOpt = None, work_dir: WorkDirOpt = None, database: DatabaseOpt = None,
) -> None:
    """Time to decide (p50/p90) per approver, surface, tool and risk; expiries; how often
    each exact action was approved."""
    now = system_now()
    try:
        start = record.parse_since(since, now)
        events = asyncio.run(_events(settings_of(config), work_dir, database))
    except ValueError as exc:
        fail(str(exc))
    except SignoffError as exc:
        fail(str(exc))
    result = record.stats(events, since=start, until=now)
    typer.echo(json.dumps(result.public(), indent=2) if as_json
               else "\n".join(stats_lines(result)))


def suggest(
    min_streak: Annotated[int, typer.Option(
        "--min", help="Approvals in a row (never denied) that make a suggestion.")
    ] = record.DEFAULT_STREAK,
    grant_for: Annotated[str, typer.Option(
        "--for", help="The time box of a suggested grant.")] = record.DEFAULT_GRANT_FOR,
    as_json: Annotated[bool, typer.Option("--json", help="JSON.")] = False,
    config: ConfigOpt = None, work_dir: WorkDirOpt = None, database: DatabaseOpt = None,
) -> None:
    """Exact actions approved N times in a row and never denied, proposed as a
    time-boxed grant or a policy line (printed only: nothing is applied)."""
    try:
        events = asyncio.run(_events(settings_of(config), work_dir, database))
        found = record.suggest(events, streak=min_streak, grant_for=grant_for)
    except ValueError as exc:
        fail(str(exc))
    except SignoffError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps({"suggestions": [s.public() for s in found]}, indent=2))
        return
    typer.echo("\n".join(suggestion_lines(found, min_streak)))
