"""MCP servers as a user meets them: `signoff tools`, `config check`, `signoff handle` and the
daemon (as subprocesses) with the real mcp-server-git, and no server left running after."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.mcp_support import commit_messages, git, make_repo, servers_of

pytestmark = pytest.mark.slow


def signoff(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff", *args], cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)


def wait_for(check, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(directory, config file, repository) with mcp-server-git configured on the repo."""
    repo = make_repo(tmp_path / "repo")
    config = tmp_path / "signoff.toml"
    config.write_text(f'''
[daemon]
work_dir = "{tmp_path / 'work'}"
[[mcp.servers]]
name = "git"
command = ["{sys.executable}", "-m", "mcp_server_git", "--repository", "{repo}"]
[mcp.servers.tools.git_status]
risk = "READ"
capability = "git.read"
targets = ["repo_path"]
[mcp.servers.tools.git_add]
targets = ["repo_path", "files"]
''')
    return tmp_path, config, repo


def test_signoff_tools_lists_builtin_and_mcp_tools(project) -> None:
    """--json rows carry name, risk, capability and source; the server is stopped after."""
    cwd, config, repo = project
    result = signoff("tools", "--config", str(config), "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["git.git_status"] == {"name": "git.git_status", "risk": "READ",
                                      "capability": "git.read", "source": "mcp:git"}
    assert rows["git.git_commit"]["risk"] == "DESTRUCTIVE"
    assert rows["git.git_commit"]["capability"] == "mcp.git"
    assert rows["read_file"]["source"] == "builtin"
    plain = signoff("tools", "--config", str(config), cwd=cwd)
    line = next(ln for ln in plain.stdout.splitlines() if "git.git_status" in ln)
    assert "READ" in line and "git.read" in line and "mcp:git" in line, plain.stdout
    assert servers_of(repo) == []


def test_config_check_exits_2_for_a_command_that_cannot_start(tmp_path: Path) -> None:
    """The file, the key and the missing program are named; exit 2."""
    config = tmp_path / "bad.toml"
    config.write_text('[[mcp.servers]]\nname = "gh"\ncommand = ["no-such-mcp-server-xyz"]\n')
    result = signoff("config", "check", str(config), cwd=tmp_path)
    assert result.returncode == 2
    assert "bad.toml: mcp.servers['gh'].command: cannot start 'no-such-mcp-server-xyz'" \
        in result.stderr


def test_handle_runs_a_read_and_blocks_a_write_when_non_interactive(project) -> None:
    """git_status completes (exit 0); git_add with --non-interactive is blocked (exit 3)."""
    cwd, config, repo = project
    read = cwd / "read.json"
    read.write_text(json.dumps([{"tool": "git.git_status", "args": {"repo_path": str(repo)}}]))
    done = signoff("handle", "status", "--config", str(config), "--steps", str(read), cwd=cwd)
    assert done.returncode == 0, done.stderr + done.stdout
    write = cwd / "write.json"
    write.write_text(json.dumps([{"tool": "git.git_add",
                                  "args": {"repo_path": str(repo), "files": ["new.txt"]}}]))
    blocked = signoff("handle", "stage it", "--config", str(config), "--steps", str(write),
                      "--non-interactive", cwd=cwd)
    assert blocked.returncode == 3, blocked.stderr + blocked.stdout
    assert "blocked" in blocked.stdout
    assert git(repo, "status", "--porcelain") == "?? new.txt\n"  # nothing staged
    assert servers_of(repo) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_daemon_serves_mcp_tools_reports_health_and_stops_its_servers(project) -> None:
    """/health shows each server; a READ call completes; a SIGTERM to the daemon's process
    group (which the server is not in) still leaves no server running."""
    cwd, config, repo = project
    with config.open("a") as fh:
        fh.write(f'[[mcp.servers]]\nname = "broken"\n'
                 f'command = ["{sys.executable}", "-c", "import sys; sys.exit(\'boom: no token\')"]\n')
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(cwd / "daemon.log", "ab") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "signoff", "daemon", "start",
                                   "--config", str(config), "--port", str(port)],
                                  cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=log, start_new_session=True)
    try:
        def health() -> dict | None:
            try:
                body = httpx.get(f"{url}/health", timeout=2).json()
            except httpx.HTTPError:
                return None
            mcp = body.get("mcp", {})
            return body if mcp.get("git") == "up" and mcp.get("broken", "").startswith(
                "down: ") else None

        body = wait_for(health, "/health to show git up and broken down")
        assert "boom: no token" in body["mcp"]["broken"]
        steps = [{"tool": "git.git_status", "args": {"repo_path": str(repo)}}]
        task_id = httpx.post(f"{url}/tasks", json={"goal": "status", "steps": steps},
                             timeout=10).json()["id"]
        def finished() -> dict | None:
            task = httpx.get(f"{url}/tasks/{task_id}", timeout=5).json()
            return task if task["state"] in ("completed", "failed") else None

        task = wait_for(finished, "the task")
        assert task["state"] == "completed", task
        (server,) = servers_of(repo)
        assert os.getpgid(server) != daemon.pid
        os.killpg(daemon.pid, signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        wait_for(lambda: servers_of(repo) == [], "the MCP server to be gone", timeout=30)
        assert commit_messages(repo) == ["initial"]
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)
        for pid in servers_of(repo):
            os.kill(pid, signal.SIGKILL)
