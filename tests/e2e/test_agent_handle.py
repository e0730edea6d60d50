"""`signoff handle GOAL` in agent mode, as a subprocess: the same loop as the daemon, asking
at the terminal, failing closed without one, printing the model's answer."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_cli import signoff
from tests.fakes.openai import Answer, FakeOpenAI, steps

SCRIPT = steps(Answer(content="The old file is no longer needed.",
                      calls=[("delete_file", {"path": "old.txt"})]),
               Answer(content="Tidied up."))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A work dir with a file to delete."""
    (tmp_path / "signoff-work").mkdir()
    (tmp_path / "signoff-work" / "old.txt").write_text("old")
    return tmp_path


def agent_config(project: Path, base_url: str) -> str:
    path = project / "agent.toml"
    path.write_text(f'[planner]\nkind = "openai"\nbase_url = "{base_url}"\n'
                    'model = "llama3.1"\ntimeout = "10s"\n')
    return str(path)


def test_handle_without_a_terminal_blocks_and_the_agent_finishes(project: Path) -> None:
    """No terminal: the gated call is blocked, the model is told and answers; exit 0 with
    its answer printed, and the file is untouched."""
    with FakeOpenAI(script=SCRIPT) as llm:
        result = signoff("handle", "tidy up", "--config", agent_config(project, llm.base_url),
                         cwd=project)
    assert result.returncode == 0, result.stderr
    assert "completed: 0 action(s) ran" in result.stdout
    assert "answer: Tidied up." in result.stdout
    assert (project / "signoff-work" / "old.txt").exists()
    told = llm.requests[1]["messages"][-1]["content"]
    assert "nobody can answer (non-interactive)" in told


def test_handle_at_a_terminal_asks_with_the_models_words(project: Path) -> None:
    """At a terminal the card shows "Why (agent): …"; approving once runs the call and the
    agent goes on to its answer."""
    with FakeOpenAI(script=SCRIPT) as llm:
        config = agent_config(project, llm.base_url)
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "signoff", "handle", "tidy up",
                                 "--config", config], cwd=project, stdin=slave, stdout=slave,
                                stderr=slave, close_fds=True)
        os.close(slave)
        screen, answered = b"", False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                screen += chunk
            if not answered and b"(default deny)" in screen:
                os.write(master, b"o\n")
                answered = True
            if proc.poll() is not None and not ready:
                break
        code = proc.wait(timeout=30)
        os.close(master)
    text = screen.decode(errors="replace")
    assert code == 0, text
    assert "Why (agent): The old file is no longer needed." in text
    assert "answer: Tidied up." in text
    assert not (project / "signoff-work" / "old.txt").exists()
    assert len(llm.requests) == 2
