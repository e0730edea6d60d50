"""The `signoff` command as a user runs it: a subprocess, real files, real exit codes."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def signoff(*args: str, cwd: Path, stdin: int | None = subprocess.DEVNULL,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff", *args], cwd=cwd, stdin=stdin,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory with a work dir holding a README and a file to delete."""
    work = tmp_path / "signoff-work"
    work.mkdir()
    (work / "README.md").write_text("hello from the readme")
    (work / "old.txt").write_text("old")
    (tmp_path / "delete.json").write_text(json.dumps(
        [{"tool": "delete_file", "args": {"path": "old.txt"}}]))
    return tmp_path


def test_config_check_accepts_the_example_config(project: Path) -> None:
    """The shipped example config is valid."""
    result = signoff("config", "check", str(ROOT / "config.example.toml"), cwd=project)
    assert result.returncode == 0, result.stderr


def test_config_check_without_a_path_checks_the_embedded_defaults(project: Path) -> None:
    """`signoff config check` alone validates the defaults (the contract's PATH is optional)."""
    env = {k: v for k, v in os.environ.items() if k != "SIGNOFF_CONFIG"}
    result = subprocess.run([sys.executable, "-m", "signoff", "config", "check"], cwd=project,
                            capture_output=True, text=True, timeout=60, check=False, env=env)
    assert result.returncode == 0, result.stderr
    assert "(embedded defaults): OK" in result.stdout


def test_config_check_names_file_key_and_problem_and_exits_2(project: Path) -> None:
    """A bad value is reported with the file, the key and what is wrong."""
    bad = project / "bad.toml"
    bad.write_text('[approvals]\ntimeout = "soon"\n')
    result = signoff("config", "check", str(bad), cwd=project)
    assert result.returncode == 2
    assert "bad.toml" in result.stderr and "approvals.timeout" in result.stderr
    assert "soon" in result.stderr


BROKEN = """
[daemon]
host = "0.0.0.0"

[approvals]
mode = "smart"

[[recipes]]
name = "typo"
match = "foo"
steps = [{tool = "send_emial", args = {to = "a@example.com"}}]

[[recipes]]
name = "incomplete"
match = "bar"
steps = [{tool = "send_email", args = {to = "a@example.com"}}]

[[schedules]]
name = "nightly"
every = "1h"
steps = [{tool = "write_file", args = {path = "x"}}]
grants = [{tool = "send_email", too = "x"}]
"""
BROKEN_KEYS = ["daemon.host", "approvals.mode", "recipes[0].steps[0]", "recipes[1].steps[0]",
               "schedules[0].steps[0]", "schedules[0].grants[0]"]


def test_config_check_reports_every_problem_daemon_start_refuses(project: Path) -> None:
    """`config check` runs daemon start's own checks and prints all of them, not the first;
    `daemon start` refuses the same file with the same lines, each naming file and key."""
    cfg = project / "broken.toml"
    cfg.write_text(BROKEN)
    checked = signoff("config", "check", str(cfg), cwd=project)
    started = signoff("daemon", "start", "--config", str(cfg), "--port", "1", cwd=project)
    assert checked.returncode == 2 and started.returncode == 2
    lines = checked.stderr.removeprefix("error: ").splitlines()
    assert [line.split(": ")[:2] for line in lines] == [[str(cfg), k] for k in BROKEN_KEYS]
    assert "unknown tool 'send_emial'" in lines[2]
    assert "missing required argument 'subject'" in lines[3]
    assert "missing required argument 'content'" in lines[4]
    assert "API key" in lines[0] and "judge endpoint" in lines[1]
    assert started.stderr == checked.stderr
    assert not (project / "signoff-state" / "signoff.db").exists()  # nothing was started


def test_config_check_passes_what_daemon_start_accepts(project: Path) -> None:
    """A public host with an API key and complete steps is fine for both."""
    cfg = project / "ok.toml"
    cfg.write_text('[daemon]\nhost = "0.0.0.0"\n[api]\nkey = "k-0123456789abcdefghijkl"\n'
                   '[[recipes]]\nname = "r"\nmatch = "x"\n'
                   'steps = [{tool = "write_file", args = {path = "{goal}.txt", content = "hi"}}]\n')
    result = signoff("config", "check", str(cfg), cwd=project)
    assert result.returncode == 0, result.stderr
    assert "ok.toml: OK" in result.stdout


def test_daemon_refusing_a_host_flag_names_the_flag(project: Path) -> None:
    """`--host 0.0.0.0` without a key: the refusal names the flag and where the key goes."""
    result = signoff("daemon", "start", "--host", "0.0.0.0", "--port", "1", cwd=project)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --host 0.0.0.0: refusing to listen on 0.0.0.0")
    assert "set [api] key in a config file" in result.stderr


def test_handle_refuses_a_config_with_broken_recipes(project: Path) -> None:
    """`signoff handle` reports the same problems (bar the listen address) and runs nothing."""
    cfg = project / "broken.toml"
    cfg.write_text(BROKEN)
    result = signoff("handle", "foo", "--config", str(cfg), cwd=project)
    assert result.returncode == 2
    assert "daemon.host" not in result.stderr
    assert f"{cfg}: recipes[0].steps[0]: unknown tool 'send_emial'" in result.stderr


def test_broken_toml_is_a_clear_error(project: Path) -> None:
    """Broken TOML names the file and the line; nothing starts."""
    bad = project / "broken.toml"
    bad.write_text("[daemon\nport = 1\n")
    result = signoff("daemon", "start", "--config", str(bad), cwd=project)
    assert result.returncode == 2
    assert "broken.toml" in result.stderr and "line 1" in result.stderr


def test_handle_runs_a_recipe_to_completion(project: Path) -> None:
    """A goal matched by a recipe completes, exit code 0."""
    result = signoff("handle", "summarize the readme", "--config",
                     str(ROOT / "config.example.toml"), cwd=project)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "completed" in result.stdout


def test_handle_without_a_terminal_fails_closed_with_exit_3(project: Path) -> None:
    """No terminal: the DESTRUCTIVE step is blocked, exit 3, the file is untouched."""
    result = signoff("handle", "tidy", "--steps", "delete.json", cwd=project)
    assert result.returncode == 3, result.stderr + result.stdout
    assert "blocked" in result.stdout
    assert (project / "signoff-work" / "old.txt").exists()


def test_handle_yolo_approves_and_audits_it(project: Path) -> None:
    """--yolo runs the gated step; the automatic approval is in the audit log."""
    result = signoff("handle", "tidy", "--steps", "delete.json", "--yolo", cwd=project)
    assert result.returncode == 0, result.stderr + result.stdout
    assert not (project / "signoff-work" / "old.txt").exists()
    audit = signoff("audit", "--json", cwd=project)
    events = [json.loads(line) for line in audit.stdout.splitlines()]
    assert any(e["actor"] == "auto:yolo" and e["tool"] == "delete_file" for e in events)
    assert signoff("audit", "--verify", cwd=project).returncode == 0


def test_audit_lists_with_a_header_task_and_scope_at_80_columns(project: Path) -> None:
    """`signoff audit` prints a header and whole task ids, kinds and scopes at 80 columns."""
    result = signoff("handle", "tidy", "--steps", "delete.json", "--yolo", cwd=project)
    assert result.returncode == 0, result.stderr + result.stdout
    task_id = re.search(r"\bt-[a-z0-9]+\b", result.stdout).group(0)  # type: ignore[union-attr]
    listed = signoff("audit", cwd=project, env={"COLUMNS": "80"})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["#", "Time", "Task", "Kind", "Decision", "Scope", "Actor"]
    approved = next(line for line in lines if "auto:yolo" in line)
    assert approved.split()[2:] == [task_id, "decision", "approve", "once", "auto:yolo"]
    assert len(approved) <= 80
    assert any("DESTRUCTIVE delete_file → old.txt" in line for line in lines)
    only = signoff("audit", "--task", task_id, cwd=project)
    assert only.returncode == 0 and task_id in only.stdout


def test_audit_of_an_unknown_task_says_so(project: Path) -> None:
    """`signoff audit --task t-unknown` names the task and exits 1 (not an empty success)."""
    assert signoff("handle", "tidy", "--steps", "delete.json", "--yolo",
                   cwd=project).returncode == 0
    for extra in ((), ("--json",)):
        result = signoff("audit", "--task", "t-unknown", *extra, cwd=project)
        assert result.returncode == 1
        assert "no task t-unknown" in result.stderr
        assert result.stdout == ""


def test_audit_where_no_daemon_ran_says_so_and_creates_nothing(tmp_path: Path) -> None:
    """`signoff audit` in a directory without a database names the path it looked at and
    how to point it elsewhere, instead of creating an empty database (exit 2)."""
    result = signoff("audit", "--verify", cwd=tmp_path)
    assert result.returncode == 2
    assert "no signoff database at" in result.stderr and "--work-dir" in result.stderr
    assert not (tmp_path / "signoff-work").exists()


def test_audit_on_an_unmoved_0_2_layout_says_where_the_database_is(tmp_path: Path) -> None:
    """A 0.2 database still in the work dir: `signoff audit` names it and says that one
    daemon start moves it, instead of reporting no database (exit 2, nothing created)."""
    (tmp_path / "signoff-work").mkdir()
    (tmp_path / "signoff-work" / "signoff.db").write_bytes(b"")
    result = signoff("audit", "--verify", cwd=tmp_path)
    assert result.returncode == 2
    assert "still at" in result.stderr and "start the daemon once" in result.stderr
    assert not (tmp_path / "signoff-state" / "signoff.db").exists()


def test_strict_yolo_blocks_instead(project: Path) -> None:
    """With evaluation.strict_yolo, --yolo turns the request into a block."""
    cfg = project / "strict.toml"
    cfg.write_text("[evaluation]\nstrict_yolo = true\n")
    result = signoff("handle", "tidy", "--steps", "delete.json", "--yolo", "--config",
                     str(cfg), cwd=project)
    assert result.returncode == 3
    assert (project / "signoff-work" / "old.txt").exists()


def test_malformed_steps_file_is_a_usage_error(project: Path) -> None:
    """A steps file that is not valid JSON is exit 2 with the file and position."""
    (project / "bad.json").write_text('[{"tool": "read_file",')
    result = signoff("handle", "x", "--steps", "bad.json", cwd=project)
    assert result.returncode == 2
    assert "bad.json" in result.stderr and "line 1" in result.stderr


def test_unknown_tool_in_steps_is_a_usage_error(project: Path) -> None:
    """An unknown tool is named; nothing runs."""
    (project / "unknown.json").write_text('[{"tool": "launch_rockets"}]')
    result = signoff("handle", "x", "--steps", "unknown.json", cwd=project)
    assert result.returncode == 2
    assert "launch_rockets" in result.stderr


def test_toml_steps_file_works(project: Path) -> None:
    """`[[steps]]` tables in TOML are accepted."""
    (project / "steps.toml").write_text(
        '[[steps]]\ntool = "write_file"\nargs = { path = "new.txt", content = "x" }\n')
    result = signoff("handle", "x", "--steps", "steps.toml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert (project / "signoff-work" / "new.txt").read_text() == "x"


def _interactive(project: Path, answer: bytes) -> tuple[int, str]:
    """Run `signoff handle` on a pseudo-terminal and type ``answer`` at the prompt."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "signoff", "handle", "tidy", "--steps",
                             "delete.json"], cwd=project, stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 30
    answered = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if not answered and b"(default deny)" in seen:
            os.write(master, answer)
            answered = True
        if proc.poll() is not None and not ready:
            break
    code = proc.wait(timeout=30)
    os.close(master)
    return code, seen.decode(errors="replace")


def test_handle_asks_at_a_terminal_and_session_runs_the_action(project: Path) -> None:
    """At a terminal the prompt offers [o]nce / [s]ession / [a]lways / [d]eny."""
    code, screen = _interactive(project, b"s\n")
    assert "[o]nce / [s]ession / [a]lways / [d]eny" in screen
    assert code == 0, screen
    assert not (project / "signoff-work" / "old.txt").exists()


def test_an_empty_answer_at_the_terminal_denies(project: Path) -> None:
    """Pressing Enter denies: exit 3 and the file stays."""
    code, screen = _interactive(project, b"\n")
    assert code == 3, screen
    assert "user denied" in screen
    assert (project / "signoff-work" / "old.txt").exists()


def test_daemon_refuses_a_public_host_without_a_key(project: Path) -> None:
    """--host 0.0.0.0 without api.key is refused with a clear message."""
    result = signoff("daemon", "start", "--host", "0.0.0.0", "--port", "1", cwd=project)
    assert result.returncode == 2
    assert "API key" in result.stderr


def test_daemon_on_a_port_in_use_is_one_clear_line_and_touches_nothing(project: Path) -> None:
    """A port already taken: exit 2, one line naming the address, no traceback, and the
    daemon did nothing before (no database or state dir created)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = signoff("daemon", "start", "--port", str(port), "--work-dir",
                         str(project / "w"), cwd=project)
    assert result.returncode == 2, result.stderr
    assert f"127.0.0.1:{port} is in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / "signoff-state").exists()


def test_daemon_with_a_database_the_server_refuses_is_a_clear_error(
        project: Path, pg_url: str) -> None:
    """A database the server says does not exist (a typo in the URL) is named and the
    daemon does not start; one that is merely away is waited for (tests/e2e/test_outages)."""
    import sqlalchemy as sa

    url = sa.engine.make_url(pg_url).set(database="signoff_no_such_db", password="pw")
    result = signoff("daemon", "start", "--port", "1", "--database",
                     url.render_as_string(hide_password=False), cwd=project)
    assert result.returncode == 2
    assert "signoff_no_such_db" in result.stderr and "does not exist" in result.stderr
    assert "pw@" not in result.stderr
