"""`signoff handle` at a real terminal (a pseudo-terminal that is the process's controlling
tty, so Ctrl-C is a real SIGINT): answers, Ctrl-C, expiry, decisions made elsewhere, and
what the run prints."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

PROMPT = b"(default deny): "


# Run in the child after setsid (start_new_session): make its stdin, the pty, the
# controlling terminal, then become `python -m signoff` (no preexec_fn: pytest has threads).
_ACQUIRE_TTY = ("import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                "os.execv(sys.executable, [sys.executable, '-m', 'signoff', *sys.argv[1:]])")


class Terminal:
    """`signoff handle …` on a pseudo-terminal; read what it shows, type into it."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ACQUIRE_TTY, "handle", *args], cwd=cwd, stdin=slave,
            stdout=slave, stderr=slave, close_fds=True, start_new_session=True)
        os.close(slave)
        self.seen = b""

    def _pump(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 4096)
        except OSError:  # the other side closed: the process ended
            return False
        self.seen += chunk
        return bool(chunk)

    def wait_for(self, text: bytes, count: int = 1, timeout: float = 30) -> None:
        """Until ``text`` was shown ``count`` times."""
        deadline = time.monotonic() + timeout
        while self.seen.count(text) < count:
            assert time.monotonic() < deadline, self.screen
            assert self._pump(0.1) or self.seen.count(text) >= count, self.screen

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def finish(self, timeout: float = 30) -> int:
        """The exit code, once the process ended (everything it printed is in ``seen``)."""
        deadline = time.monotonic() + timeout
        while self._pump(0.1):
            assert time.monotonic() < deadline, f"still running:\n{self.screen}"
        code = self.proc.wait(timeout=timeout)
        os.close(self.master)
        return code

    @property
    def screen(self) -> str:
        return self.seen.decode(errors="replace").replace("\r\n", "\n")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A work dir with a README and a file to delete, and steps that read then delete."""
    work = tmp_path / "signoff-work"
    work.mkdir()
    (work / "README.md").write_text("hello from the readme\nsecond line\n")
    (work / "old.txt").write_text("old")
    (tmp_path / "steps.json").write_text(json.dumps([
        {"tool": "read_file", "args": {"path": "README.md"}},
        {"tool": "delete_file", "args": {"path": "old.txt"}}]))
    return tmp_path


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    """Terminals started by a test, killed if the test left one running."""
    started: list[Terminal] = []
    yield started
    for term in started:
        term.kill()


def start(terminals: list[Terminal], project: Path, *args: str) -> Terminal:
    term = Terminal(project, "tidy", "--steps", "steps.json", *args)
    terminals.append(term)
    return term


def audit(project: Path, *args: str) -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "signoff", "audit", "--json", *args],
                            cwd=project, capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def test_ctrl_c_at_the_prompt_denies_and_is_audited(project: Path,
                                                    terminals: list[Terminal]) -> None:
    """Ctrl-C at the prompt is a deny by the terminal user: exit 3, audited, file kept."""
    term = start(terminals, project)
    term.wait_for(PROMPT)
    term.type(b"\x03")
    assert term.finish() == 3, term.screen
    assert "user denied" in term.screen
    assert (project / "signoff-work" / "old.txt").exists()
    [deny] = [e for e in audit(project) if e["kind"] == "decision"]
    assert deny["decision"] == "deny" and deny["actor"].startswith("terminal:")
    assert "Ctrl-C" in deny["reason"]


def test_an_unknown_answer_asks_again(project: Path, terminals: list[Terminal]) -> None:
    """`y` and `x` are asked again; `o` then approves and the action runs."""
    term = start(terminals, project)
    term.wait_for(PROMPT)
    term.type(b"y\n")
    term.wait_for(PROMPT, 2)
    term.type(b"x\n")
    term.wait_for(PROMPT, 3)
    term.type(b"o\n")
    assert term.finish() == 0, term.screen
    assert not (project / "signoff-work" / "old.txt").exists()
    assert "user denied" not in term.screen


def test_the_approval_timeout_ends_the_prompt(project: Path, terminals: list[Terminal]) -> None:
    """With approvals.timeout = 1s an unanswered prompt ends as "approval timed out", exit 3."""
    (project / "short.toml").write_text('[approvals]\ntimeout = "1s"\n')
    term = start(terminals, project, "--config", "short.toml")
    term.wait_for(PROMPT)
    assert term.finish() == 3, term.screen
    assert "approval timed out" in term.screen
    assert (project / "signoff-work" / "old.txt").exists()
    [expired] = [e for e in audit(project) if e["kind"] == "expired"]
    assert expired["actor"] == "auto:timeout"


def test_outputs_are_shown_and_the_last_line_once(project: Path,
                                                  terminals: list[Terminal]) -> None:
    """What read_file read is shown; the closing "task … completed" line appears once."""
    term = start(terminals, project)
    term.wait_for(PROMPT)
    term.type(b"o\n")
    assert term.finish() == 0, term.screen
    screen = term.screen
    assert "✓ read_file README.md" in screen and "hello from the readme" in screen
    assert "✓ delete_file old.txt" in screen
    assert screen.index("hello from the readme") < screen.index("[DESTRUCTIVE]")
    finals = [line for line in screen.splitlines() if "completed" in line.lower()]
    assert len(finals) == 1 and finals[0].startswith("task t-"), screen


class Daemon:
    """`signoff daemon start` on the same work dir (and so the same database)."""

    def __init__(self, project: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(project / "daemon.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "signoff", "daemon", "start", "--port", str(self.port)],
            cwd=project, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 30
        while not self._healthy():
            assert self.proc.poll() is None and time.monotonic() < deadline, "daemon down"
            time.sleep(0.1)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def daemon(project: Path) -> Iterator[Daemon]:
    """A daemon sharing the project's work dir and database."""
    running = Daemon(project)
    yield running
    running.stop()


def _pending(daemon: Daemon) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        items = httpx.get(f"{daemon.url}/approvals", params={"status": "pending"},
                          timeout=5).json()["items"]
        if items:
            return dict(items[0])
        assert time.monotonic() < deadline, "no pending approval"
        time.sleep(0.05)


@pytest.mark.parametrize(("decision", "code"), [("approve", 0), ("deny", 3)])
def test_a_decision_in_the_daemon_ends_the_prompt(project: Path, terminals: list[Terminal],
                                                  daemon: Daemon, decision: str,
                                                  code: int) -> None:
    """Approved or denied over the daemon's API, the prompt ends without an answer typed."""
    term = start(terminals, project)
    term.wait_for(PROMPT)
    task_id = _pending(daemon)["task_id"]
    body = {"scope": "once"} if decision == "approve" else {"reason": "not today"}
    answer = httpx.post(f"{daemon.url}/tasks/{task_id}/{decision}", json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    assert term.finish() == code, term.screen
    assert "web:local" in term.screen
    assert (project / "signoff-work" / "old.txt").exists() is (decision == "deny")
