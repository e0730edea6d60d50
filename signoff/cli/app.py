"""The `signoff` Typer app and what every command module shares: the config and database options,
one-line failures, loading settings, logging.

Command modules (`main`, `tools`, `mcp_commands`, `schedules`, `receipts`, `record`,
`policy_cmd`; `client` keeps a `fail` of its own, exit 1) import from here
and `main` registers them, so no two command modules import each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from signoff.errors import ConfigError

# pretty_exceptions_show_locals: a traceback must never print tokens held in locals.
app = typer.Typer(no_args_is_help=True, add_completion=False,
                  pretty_exceptions_show_locals=False,
                  help="signoff: AI agents do the work, a person keeps the last word.")
daemon_app = typer.Typer(no_args_is_help=True, help="Run the always-on daemon.")
config_app = typer.Typer(no_args_is_help=True, help="Check or show configuration files.")


def _print_version(value: bool) -> None:
    if value:
        from signoff._version import __version__

        typer.echo(f"signoff {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print signoff's version and exit.")] = False) -> None:
    # Only the option: its callback prints and exits before any command runs.
    pass


app.add_typer(daemon_app, name="daemon")
app.add_typer(config_app, name="config")

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", envvar="SIGNOFF_CONFIG",
                                                help="TOML config file (default: built-in).")]
# The commands that read the daemon's database directly (audit, nodes, receipt, keys,
# stats, suggest) find it as the daemon does, or are told where it is.
WorkDirOpt = Annotated[Path | None, typer.Option(
    help="Work dir of the daemon (its database is in the state dir beside it).")]
DatabaseOpt = Annotated[str | None, typer.Option(help="SQLAlchemy URL of the store.")]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear line to stderr and exit."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def load(config: Path | None, *, chat: bool = True) -> Any:
    """Settings from a file, or the embedded defaults; config errors exit 2.

    ``chat=False`` for commands that run no chat surface: its unset secrets are no error
    (see `signoff.config.settings.load_settings`).
    """
    from signoff.config.settings import Settings, load_settings

    try:
        return load_settings(config, chat=chat) if config else Settings.default()
    except ConfigError as exc:
        fail(str(exc))


def setup_logging(level: str = "INFO") -> None:
    """Plain, grep-able log lines on stderr (see signoff/logs.py)."""
    from signoff.logs import setup

    setup(level)
