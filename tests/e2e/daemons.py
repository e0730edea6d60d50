"""`signoff daemon start` as subprocesses, for tests that need real daemons (several nodes
on one database, crashes): each with its own work dir, config file, port and log."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    """Poll ``check`` until it is truthy; fail naming ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def toml_value(value: Any) -> str:
    """A TOML literal for a str, int, bool, or a list of those (JSON happens to match)."""
    return json.dumps(value)


class DaemonProcess:
    """One daemon: ``root/work`` is its work dir, ``root/daemon.log`` its stderr."""

    def __init__(self, root: Path, *, daemon: Mapping[str, Any] | None = None,
                 extra_toml: str = "") -> None:
        self.root = root
        self.work = root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = root / "signoff.toml"
        lines = ["[daemon]", f"work_dir = {toml_value(str(self.work))}"]
        lines += [f"{key} = {toml_value(value)}" for key, value in (daemon or {}).items()]
        self.config.write_text("\n".join(lines) + "\n" + extra_toml)
        self.log = root / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True) -> None:
        """Start it (and wait for /health unless told not to)."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "signoff", "daemon", "start", "--config",
                 str(self.config), "--port", str(self.port)],
                cwd=self.root, stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ))
        if wait:
            self.wait_healthy()

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until /health answers."""
        wait_for(self.healthy, f"{self.root.name} to answer /health", timeout)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def health(self) -> dict[str, Any]:
        r = httpx.get(f"{self.url}/health", timeout=10)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def kill(self) -> None:
        """kill -9."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in 20 s."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def submit(self, steps: list[dict[str, Any]], goal: str = "test",
               client: httpx.Client | None = None) -> str:
        r = (client or httpx).post(f"{self.url}/tasks", json={"goal": goal, "steps": steps},
                                   timeout=30)
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def task(self, task_id: str) -> dict[str, Any]:
        r = httpx.get(f"{self.url}/tasks/{task_id}", timeout=10)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def approve(self, task_id: str, scope: str = "once") -> httpx.Response:
        return httpx.post(f"{self.url}/tasks/{task_id}/approve", json={"scope": scope},
                          timeout=30)
