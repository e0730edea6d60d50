"""`signoff audit`: list events, verify the hash chain, pin and check its head."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from signoff.config.settings import Settings
from signoff.errors import BadArguments
from signoff.runtime import audit as chain
from signoff.runtime.store.factory import make_store


def _expected(text: str | None) -> tuple[int, str] | None:
    if text is None:
        return None
    count, _, digest = text.partition(":")
    if not count.isdigit() or len(digest) != 64:
        raise BadArguments(f"--expect-head {text!r}: use COUNT:HASH as printed by --head")
    return int(count), digest


async def run_audit(settings: Settings, *, task: str | None, verify: bool, head: bool,
                    expect_head: str | None, as_json: bool, work_dir: Path | None,
                    database: str | None) -> int:
    """Do what the flags ask; return the exit code."""
    expected = _expected(expect_head)
    store = make_store(database or settings.database_url(work_dir))
    await store.open()
    try:
        if verify:
            result = await chain.verify(store, expect_head=expected)
            if result.ok:
                typer.echo(f"ok: {result.count} events, head {result.count}:{result.head}")
                return 0
            typer.secho(f"audit log BROKEN at event {result.bad_event}: {result.problem}",
                        fg=typer.colors.RED, err=True)
            return 1
        if head:
            count, digest = await store.audit_head()
            typer.echo(f"{count}:{digest}")
            return 0
        cursor: str | None = None
        while True:
            page = await store.audit_events(task_id=task, limit=500, cursor=cursor)
            for event in page.items:
                data = event.public()  # type: ignore[attr-defined]
                if as_json:
                    typer.echo(json.dumps(data))
                else:
                    typer.echo(f"{data['id']:>6} {data['at'][:19]} {data['kind']:<13} "
                               f"{data['decision'] or '':<9} {data['actor'] or '':<22} "
                               f"{data['tool'] or ''} {','.join(data['targets'])} "
                               f"{data['reason'] or ''}")
            if not page.next_cursor:
                return 0
            cursor = page.next_cursor
    finally:
        await store.close()
