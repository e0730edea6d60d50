"""`signoff --help` and each command's help as people see them: commands grouped by what
they need, no `<bool>` after a flag, one-sentence summaries."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from signoff.cli.main import PANELS, command


def helptext(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-m", "signoff", *args, "--help"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_commands_are_grouped_by_what_they_need() -> None:
    """Every command sits in one of the named panels; none is left under "Commands"."""
    text = helptext()
    for panel in PANELS:
        assert f"─ {panel} ─" in text, text
    assert "─ Commands ─" not in text
    listed = {name for names in PANELS.values() for name in names}
    assert listed == set(command().commands)


@pytest.mark.parametrize("args", [[], ["audit"], ["daemon", "start"], ["tasks"], ["handle"],
                                  ["schedules"], ["config", "check"]])
def test_no_flag_shows_a_type(args: list[str]) -> None:
    """Flags (`--help`, `--json`, `--verify`) show no `<bool>`."""
    text = helptext(*args)
    assert "--help" in text and "<bool>" not in text


def test_the_summaries_are_sentences() -> None:
    """Each command's one-line summary starts with a capital and ends with a full stop."""
    for name, cmd in command().commands.items():
        summary = " ".join((cmd.help or "").split("\n\n")[0].split())
        assert summary[:1].isupper() and summary.endswith("."), (name, summary)


def test_each_summary_in_the_list_is_one_unbroken_sentence() -> None:
    """`signoff --help` shows a command's whole summary, not cut where its docstring was
    wrapped in the source (Typer's list kept those line breaks: "(the task fails; an")."""
    env = {**os.environ, "COLUMNS": "250"}
    for args in ([], ["config"]):
        done = subprocess.run([sys.executable, "-m", "signoff", *args, "--help"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        group = command().commands[args[0]] if args else command()
        for name, cmd in group.commands.items():
            summary = " ".join((cmd.help or "").split("\n\n")[0].split())
            assert f"{name} " in done.stdout and summary in done.stdout, (name, summary)


def test_a_later_paragraph_keeps_no_line_break_of_the_source() -> None:
    """`handle --help` wraps its second paragraph at the terminal's width only: the source's
    own breaks left "asked" alone on a line at 80 columns."""
    env = {**os.environ, "COLUMNS": "250"}
    done = subprocess.run([sys.executable, "-m", "signoff", "handle", "--help"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert ("an answer that is none of the keys is asked again; approvals.timeout ends the "
            "prompt") in done.stdout


def test_daemon_start_says_where_host_and_port_default_from() -> None:
    """--host and --port name the config keys they override, and --port says the client
    commands then need --url: "default 8080" misled when the config set another port."""
    text = " ".join(helptext("daemon", "start").replace("│", " ").split())
    assert "default: daemon.host of the config, 127.0.0.1" in text
    assert "default: daemon.port of the config, 8080" in text
    assert "--url or SIGNOFF_URL" in text


def test_version_prints_the_package_version() -> None:
    """`signoff --version` answers with the version the package was built as, and exits 0
    without running a command."""
    from signoff import __version__

    done = subprocess.run([sys.executable, "-m", "signoff", "--version"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"signoff {__version__}\n"
