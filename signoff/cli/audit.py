"""`signoff audit`: list events, verify the hash chain (against pinned keys with
``--key``), pin and check its head.

The listing is two lines per event, in fixed columns, each line cut with "…" to the
terminal's width (80 columns when none; `signoff.cli.tables`):
``#  time  task  kind  decision  scope  actor``, then what it was about (risk, tool →
targets, reason). A date line starts each UTC day.
``--json`` prints the API's event objects, one per line.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from signoff.cli.tables import cut
from signoff.config.settings import Settings
from signoff.errors import BadArguments
from signoff.runtime import audit as chain
from signoff.runtime import signing
from signoff.runtime.models import AuditEvent
from signoff.runtime.passkeys import assertion_check
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import TaskStore

# (header, width) of the first line's columns; the actor takes the rest of the line.
COLUMNS = (("#", 5), ("Time", 8), ("Task", 12), ("Kind", 16), ("Decision", 8), ("Scope", 7))
INDENT = " " * (COLUMNS[0][1] + 1)


def _sqlite_must_exist(url: str) -> None:
    """Reading must not create an empty database where the daemon's is expected."""
    path = url.split(":///", 1)[1].split("?", 1)[0] if url.startswith("sqlite") else ""
    if path and path != ":memory:" and not Path(path).exists():
        raise BadArguments(f"no signoff database at {path}: run this where the daemon runs, "
                           "or pass --work-dir, --database or --config")


def _expected(text: str | None) -> tuple[int, str] | None:
    if text is None:
        return None
    count, _, digest = text.partition(":")
    if not count.isdigit() or len(digest) != 64:
        raise BadArguments(f"--expect-head {text!r}: use COUNT:HASH as printed by --head")
    return int(count), digest


async def open_store(settings: Settings, *, work_dir: Path | None, database: str | None
                     ) -> TaskStore:
    """The daemon's store, opened for a command that reads (and must not create) it."""
    url = database or settings.database_url(work_dir)
    old = settings.resolved_work_dir(work_dir) / "signoff.db"
    if database is None and settings.daemon.database is None and old.exists() \
            and not settings.resolved_state_dir(work_dir).joinpath("signoff.db").exists():
        raise BadArguments(f"the database is still at {old} (0.2 kept it in the work dir): "
                           "start the daemon once, it moves it into the state dir")
    _sqlite_must_exist(url)
    store = make_store(url)
    await store.open()
    return store


def _trusted(keys: list[str] | None) -> list[str] | None:
    """The public keys given to --key (each the key, or a file holding it), checked."""
    if not keys:
        return None
    from signoff.cli.receipts import read_key_arg

    found = [read_key_arg(k) for k in keys]
    for text in found:
        try:
            signing.key_id_of(text)
        except ValueError:
            raise BadArguments(f"--key {text[:60]!r}: not a base64url Ed25519 public key "
                               "(as `signoff keys` prints it)") from None
    return found


async def run_audit(settings: Settings, *, task: str | None, verify: bool, head: bool,
                    expect_head: str | None, as_json: bool, work_dir: Path | None,
                    database: str | None, keys: list[str] | None = None) -> int:
    """Do what the flags ask; return the exit code."""
    expected = _expected(expect_head)
    trusted = _trusted(keys)
    store = await open_store(settings, work_dir=work_dir, database=database)
    try:
        if verify:
            result = await chain.verify(store, expect_head=expected,
                                        check=assertion_check(store), trusted=trusted)
            if result.ok:
                typer.echo(f"ok: {result.count} events ({result.signed} signed), "
                           f"head {result.count}:{result.head}")
                return 0
            typer.secho(f"audit log BROKEN at event {result.bad_event}: {result.problem}",
                        fg=typer.colors.RED, err=True)
            return 1
        if head:
            count, digest = await store.audit_head()
            typer.echo(f"{count}:{digest}")
            return 0
        return await _list(store, task=task, as_json=as_json)
    finally:
        await store.close()


def _row(cells: list[str]) -> str:
    first = cells[0].rjust(COLUMNS[0][1])
    rest = [c.ljust(width) for c, (_, width) in zip(cells[1:], COLUMNS[1:], strict=False)]
    return " ".join([first, *rest, *cells[len(COLUMNS):]]).rstrip()


def header() -> str:
    """The column headers."""
    return _row([name for name, _ in COLUMNS] + ["Actor"])


def event_lines(event: AuditEvent) -> list[str]:
    """One event: its columns, then what it was about (when there is anything to say)."""
    unreadable = event.kind == chain.UNREADABLE
    time = "?" if unreadable else event.at.strftime("%H:%M:%S")
    lines = [_row([str(event.id), time, event.task_id or "-", event.kind,
                   event.decision or "", event.scope or "", event.actor or ""])]
    what = " ".join(filter(None, [event.risk, event.tool]))
    if event.targets:
        what += " → " + ", ".join(event.targets)
    about = " — ".join(filter(None, [what.strip(), event.reason]))
    if about:
        lines.append(INDENT + about)
    return lines


async def _list(store: TaskStore, *, task: str | None, as_json: bool) -> int:
    """Print every event (of one task); an unknown task is an error (exit 1)."""
    cursor: str | None = None
    day, printed = "", 0
    width = Console().width  # lines are cut to the terminal (80 columns when none)
    while True:
        page = await store.audit_events(task_id=task, limit=500, cursor=cursor)
        for event in page.items:
            assert isinstance(event, AuditEvent)
            printed += 1
            if as_json:
                typer.echo(json.dumps(event.public()))
                continue
            if printed == 1:
                typer.echo(cut(header(), width))
            date = "" if event.kind == chain.UNREADABLE else event.at.date().isoformat()
            if date and date != day:
                typer.echo(f"{date} (UTC)")
                day = date
            for line in event_lines(event):
                typer.echo(cut(line, width))
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    if printed == 0:
        if task is not None and await store.get_task(task) is None:
            typer.secho(f"error: no task {task} (and no audit events for it)",
                        fg=typer.colors.RED, err=True)
            return 1
        if not as_json:
            typer.echo(f"no audit events for task {task}" if task else "no audit events")
    return 0
