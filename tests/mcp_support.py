"""Helpers for the tests of tools from MCP servers: real git repositories and the config
that points the real `mcp-server-git` and `mcp-server-time` (dev extra) at them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from signoff.runtime.models import Action

GIT_RULES: dict[str, Any] = {
    "git_status": {"risk": "READ", "capability": "git.read", "targets": ["repo_path"]},
    "git_add": {"capability": "git.write", "targets": ["repo_path"]},
    "git_commit": {"capability": "git.write", "targets": ["repo_path"], "content": ["message"]},
}


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` and return its stdout."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, timeout=30).stdout


def make_repo(path: Path) -> Path:
    """A git repository with one commit and an untracked file ``new.txt``."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "Test")
    git(path, "commit", "-q", "--allow-empty", "-m", "initial")
    (path / "new.txt").write_text("hello\n")
    return path


def commit_messages(repo: Path) -> list[str]:
    """Commit subjects, newest first."""
    return git(repo, "log", "--format=%s").split("\n")[:-1]


def git_server(root: Path, *, rules: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """An ``[[mcp.servers]]`` entry for mcp-server-git confined to ``root``."""
    return {"name": "git",
            "command": [sys.executable, "-m", "mcp_server_git", "--repository", str(root)],
            "tools": GIT_RULES if rules is None else rules, **extra}


def time_server(**extra: Any) -> dict[str, Any]:
    """An ``[[mcp.servers]]`` entry for mcp-server-time."""
    return {"name": "time", "command": [sys.executable, "-m", "mcp_server_time",
                                        "--local-timezone", "UTC"], **extra}


def servers_of(repo: Path) -> list[int]:
    """PIDs of running mcp-server-git processes pointed at ``repo``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if b"mcp_server_git" in argv and str(repo).encode() in argv and state != "Z":
            found.append(int(entry.name))
    return found


def mcp_config(*servers: dict[str, Any]) -> dict[str, Any]:
    """Settings overrides with these MCP servers."""
    return {"mcp": {"servers": list(servers)}}


def status(repo: Path) -> Action:
    """git.git_status on ``repo``."""
    return Action(tool="git.git_status", args={"repo_path": str(repo)})


def add(repo: Path, *files: str) -> Action:
    """git.git_add of ``files`` in ``repo``."""
    return Action(tool="git.git_add", args={"repo_path": str(repo), "files": list(files)})


def commit(repo: Path, message: str = "add new.txt") -> Action:
    """git.git_commit in ``repo``."""
    return Action(tool="git.git_commit", args={"repo_path": str(repo), "message": message})


async def eventually(check: Callable[[], bool], what: str, *, timeout: float = 60.0) -> None:
    """Wait until ``check()`` holds; fail naming ``what`` (a generous bound, never asserted
    as a duration: the machine may be busy)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
