"""Ctrl-C while an approved action runs under `signoff handle` (a real SIGINT from the
pseudo-terminal): one line about the task and what becomes of it, exit 130, no
traceback; the task is left for the daemon to take up."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_handle_terminal import PROMPT, Terminal


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A work dir and one step that runs for a long time once approved."""
    (tmp_path / "signoff-work").mkdir()
    (tmp_path / "steps.json").write_text(json.dumps([
        {"tool": "run_command", "args": {"command": "sleep 60"}}]))
    return tmp_path


@pytest.fixture
def term(project: Path) -> Iterator[Terminal]:
    """`signoff handle` on a pseudo-terminal, killed if the test left it running."""
    terminal = Terminal(project, "wait a minute", "--steps", "steps.json")
    yield terminal
    terminal.kill()


def executing(project: Path) -> bool:
    """The approved action has started (the task row carries its crash marker)."""
    db = project / "signoff-state" / "signoff.db"
    if not db.exists():
        return False
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT data FROM tasks").fetchall()
    return any(json.loads(r[0]).get("executing") for r in rows)


def test_ctrl_c_during_an_approved_action_says_what_becomes_of_the_task(
        project: Path, term: Terminal) -> None:
    """One line naming the task and its state, exit 130, no traceback."""
    term.wait_for(PROMPT)
    term.type(b"o\n")
    deadline = time.monotonic() + 30
    while not executing(project):
        assert time.monotonic() < deadline, term.screen
        time.sleep(0.05)  # polling a file another process writes: no event to wait on
    term.type(b"\x03")
    assert term.finish() == 130, term.screen
    screen = term.screen
    assert "Traceback" not in screen, screen
    [line] = [ln for ln in screen.splitlines() if "interrupted: " in ln]
    assert "interrupted: task t-" in line, line
    assert "stays in_progress (its run_command was cut short)" in line, line
    assert "takes it up again" in line
