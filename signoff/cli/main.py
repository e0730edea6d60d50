"""The `signoff` command line: the daemon, one-shot runs, audit, config checks, and the
client commands that talk to a running daemon over HTTP. The Typer app and the options
every command module shares are in `signoff/cli/app.py`; this module registers the rest.

Exit codes: 0 ok; 1 failed; 2 usage or configuration error (nothing started);
3 blocked, denied or timed out (`signoff handle`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from signoff.cli.app import (
    ConfigOpt,
    DatabaseOpt,
    WorkDirOpt,
    app,
    config_app,
    daemon_app,
    fail,
    load,
    setup_logging,
)
from signoff.errors import ConfigError, SignoffError, StoreError


@daemon_app.command("start")
def daemon_start(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(
        help="Bind address (default: daemon.host of the config, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(
        help="HTTP port (default: daemon.port of the config, 8080); on another port the "
             "client commands need --url or SIGNOFF_URL.")] = None,
    work_dir: Annotated[Path | None, typer.Option(
        help="Sandbox for file tools (state: daemon.state_dir, or signoff-state beside it)."
    )] = None,
    database: Annotated[str | None, typer.Option(help="The store's SQLAlchemy URL.")] = None,
    reset: Annotated[bool, typer.Option(
        help="Delete all tasks, approvals and audit first.")] = False,
    autonomous_risks: Annotated[str | None, typer.Option(
        help="Risk classes that run without asking, e.g. READ,DRAFT (use with care).")] = None,
) -> None:
    """Start the daemon: worker, approvals, web console and API, chat surfaces, schedules."""
    from signoff.cli.daemon import run_daemon
    from signoff.wiring import event_loop

    setup_logging()
    settings = load(config)
    risks = _risks(autonomous_risks)
    try:
        code = event_loop.run(run_daemon(settings, host=host, port=port, work_dir=work_dir,
                                         database=database, reset=reset,
                                         autonomous_risks=risks, config_path=config),
                              settings.daemon.event_loop)
    except (ConfigError, StoreError) as exc:
        fail(str(exc))
    raise typer.Exit(code)


def _risks(text: str | None) -> list[Any] | None:
    from signoff.runtime.models import RiskClass

    if text is None:
        return None
    try:
        return [RiskClass.parse(p) for p in text.split(",") if p.strip()]
    except ValueError as exc:
        fail(f"--autonomous-risks: {exc}")


@app.command()
def handle(
    goal: Annotated[str, typer.Argument(help="What to do, in words.")],
    config: ConfigOpt = None,
    steps: Annotated[Path | None, typer.Option(help="JSON or TOML file of explicit steps.")] = None,
    non_interactive: Annotated[bool, typer.Option(
        help="Nobody will answer: every approval request becomes a block.")] = False,
    yolo: Annotated[bool, typer.Option(
        help="Approve every request automatically (BLOCK stays BLOCK).")] = False,
    work_dir: Annotated[Path | None, typer.Option(
        help="Sandbox for file tools (state: daemon.state_dir, or signoff-state beside it)."
    )] = None,
) -> None:
    """Run one goal now, asking at this terminal for each SEND or DESTRUCTIVE action.

    Enter, end of input and Ctrl-C deny; an answer that is none of the keys is asked
    again; approvals.timeout ends the prompt ("approval timed out"), and so does a
    decision taken in the console or over the API of a daemon on the same database.
    """
    from signoff.cli.handle import (
        EXIT_INTERRUPTED,
        exit_code,
        interrupted,
        opened,
        run_once,
    )
    from signoff.cli.steps import load_steps
    from signoff.config import preflight
    from signoff.embed import summarize
    from signoff.runtime.models import RunMode
    from signoff.wiring import build_node, build_registry

    settings = load(config)
    try:  # what `config check` reports, but for the listen address (nothing listens)
        preflight.check(settings, build_registry(settings, work_dir), path=config,
                        serving=False)
    except ConfigError as exc:
        fail(str(exc))
    try:
        actions = load_steps(steps) if steps else None
    except SignoffError as exc:
        fail(str(exc))
    interactive = sys.stdin.isatty() and not non_interactive
    mode = (RunMode.YOLO if yolo else RunMode.TERMINAL if interactive
            else RunMode.NON_INTERACTIVE)

    async def main() -> int:
        from signoff.adapters.terminal.surface import TerminalSurface, render_record

        terminal = TerminalSurface() if mode is RunMode.TERMINAL else None
        surfaces = {"terminal": terminal} if terminal else {}
        node = build_node(settings, work_dir=work_dir, surfaces=surfaces)  # type: ignore[arg-type]
        begun: list[Any] = []
        async with opened(node):
            try:
                task = await run_once(node, goal, steps=actions, mode=mode, terminal=terminal,
                                      on_action=lambda r: typer.echo(render_record(r)),
                                      started=begun.append)
            except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels us on SIGINT)
                left = await node.store.get_task(begun[0].id) if begun else None
                typer.secho(interrupted(left), err=True, fg=typer.colors.YELLOW)
                return EXIT_INTERRUPTED
        typer.echo(f"task {task.id} {summarize(task)}")
        return exit_code(task)

    try:
        code = asyncio.run(main())
    except SignoffError as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # a second Ctrl-C while closing: no traceback either
        typer.secho("interrupted", err=True, fg=typer.colors.YELLOW)
        code = EXIT_INTERRUPTED
    raise typer.Exit(code)


@app.command()
def audit(
    config: ConfigOpt = None,
    task: Annotated[str | None, typer.Option(help="Only events of this task.")] = None,
    verify: Annotated[bool, typer.Option(help="Re-walk the hash chain; exit 1 if broken.")] = False,
    head: Annotated[bool, typer.Option(help="Print the event count and head hash.")] = False,
    expect_head: Annotated[str | None, typer.Option(
        help="With --verify: COUNT:HASH from an earlier --head that must still be there.")] = None,
    key: Annotated[list[str] | None, typer.Option(
        help="With --verify: a public key you trust (base64url, or a file holding it; "
             "repeat for each node): every signed event must be signed by one of them.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines for scripts.")] = False,
    work_dir: WorkDirOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """List, verify or pin the audit log in the daemon's database."""
    from signoff.cli.audit import run_audit

    settings = load(config, chat=False)
    try:
        code = asyncio.run(run_audit(settings, task=task, verify=verify, head=head,
                                     expect_head=expect_head, keys=key, as_json=as_json,
                                     work_dir=work_dir, database=database))
    except SignoffError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command()
def nodes(
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list for scripts.")] = False,
    work_dir: WorkDirOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """List the live daemons sharing the configured database (the node registry)."""
    from signoff.cli.nodes import run_nodes

    settings = load(config, chat=False)
    try:
        code = asyncio.run(run_nodes(settings, as_json=as_json, work_dir=work_dir,
                                     database=database))
    except SignoffError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@config_app.command("check")
def config_check(
    path: Annotated[Path | None, typer.Argument(
        envvar="SIGNOFF_CONFIG",
        help="The TOML file (default: $SIGNOFF_CONFIG, else the embedded defaults).")] = None,
) -> None:
    """Validate a config file as `daemon start` would; print a summary, or every problem
    and exit 2."""
    from signoff.config import preflight
    from signoff.config.settings import load_settings, summary
    from signoff.wiring import build_registry

    try:
        settings = load_settings(path)
        registry = build_registry(settings)
        found = (preflight.problems(settings, registry, path=path)
                 + preflight.storage(settings, path=path))
        if found:
            raise ConfigError("\n".join(found))
    except ConfigError as exc:
        fail(str(exc))
    for notice in preflight.notices(settings, registry, path=path):
        typer.echo(f"warning: {notice}", err=True)
    typer.echo(summary(settings, path))


@config_app.command("show")
def config_show(
    path: Annotated[Path | None, typer.Argument(
        envvar="SIGNOFF_CONFIG",
        help="The TOML file (default: $SIGNOFF_CONFIG, else the embedded defaults).")] = None,
) -> None:
    """Print the effective configuration as JSON, defaults included, secrets masked."""
    from signoff.config.settings import shown

    typer.echo(dumps(shown(load(path, chat=False))))


def _load_node(config: str | Path | None) -> Any:
    # The wiring (every part of a node) is imported when a command needs a node, not
    # for each start of the CLI: `signoff --help` took ~2 s with it. The commands that
    # load a node this way (schedules, oncall) post nothing to a chat surface.
    from signoff.wiring import load_node

    return load_node(config, chat=False)


_registered: list[bool] = []


def _register_extras() -> None:
    """Commands owned by other modules: the HTTP client, tools, schedules, MCP stdio
    (once per process, however often the CLI is built)."""
    from signoff.cli import client, mcp_commands, policy_cmd, receipts, record, schedules, tools

    if _registered:
        return
    _registered.append(True)
    client.register(app)
    receipts.register(app)
    record.register(app)
    tools.register(app)
    policy_cmd.register(app)
    schedules.register(app, load_node=_load_node)
    mcp_commands.register(app)


# `signoff --help` groups the commands by what they need; a command not listed here
# stays under "Commands" (test_cli_help checks that every one is listed).
PANELS = {
    "Run the daemon": ("daemon", "nodes", "config"),
    "Work here, on the daemon's config and database": (
        "handle", "schedules", "oncall", "tools", "policy", "audit"),
    "Prove it afterwards (the audit log, here)": ("receipt", "keys", "stats", "suggest"),
    "Decide (talks to a running daemon)": ("tasks", "show", "approve", "deny", "grants"),
    "Connect agents": ("mcp-gate", "mcp-permission", "claude-hook"),
}


def command() -> Any:
    """The whole CLI as a click command, its help grouped (`PANELS`) and without a type
    shown for flags (Typer renders every flag as ``<bool>``)."""
    import typer.main

    _register_extras()
    root = typer.main.get_command(app)
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}
    _quiet_flags(root, None)
    _unwrap_help(root)
    for name, sub in getattr(root, "commands", {}).items():
        sub.rich_help_panel = panel_of.get(name)
    return root


def _unwrap_help(cmd: Any) -> None:
    """Join the lines of each paragraph of the help of every command below ``cmd``.

    Typer's rich mode keeps the line breaks of a docstring wrapped in the source and then
    wraps again at the terminal's width: a group's list cut summaries mid-sentence ("(the
    task fails; an") and `handle --help` left a lone "asked" on a line. Every paragraph of
    our help is prose, so a single line break is only a space.
    """
    for sub in getattr(cmd, "commands", {}).values():
        if sub.help:
            paragraphs = inspect.cleandoc(sub.help).split("\n\n")
            sub.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
        _unwrap_help(sub)


def _quiet_flags(cmd: Any, parent: Any) -> None:
    """Blank the metavar of every flag (``--help`` included) of ``cmd`` and below."""
    ctx = typer.Context(cmd, parent=parent, info_name=cmd.name)
    for param in cmd.get_params(ctx):
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        _quiet_flags(sub, ctx)


def main() -> None:
    """Console-script entry point."""
    command()(prog_name="signoff")


def dumps(obj: Any) -> str:
    """JSON for --json output."""
    return json.dumps(obj, indent=2, default=str)
