"""A surface from another package, end to end: `echo` (tests/plugins/signoff_echo_surface)
is installed beside signoff, touching none of its files; `signoff config check` knows its
section and its channels, and a real `signoff daemon start` posts the card to it and takes
the decision made through it."""

from __future__ import annotations

import os
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

from tests.plugins.install import ECHO, install_plugin

TOKEN = "echo-t0ken"
CONFIG = """\
[approvals]
approvers = ["echo:bob"]

[echo]
channel = "approvals"
token = "${ECHO_TOKEN}"

[[notify]]
channel = "echo:team"
events = ["waiting_approval", "completed"]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, what: str, timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := check():
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory with echo installed in ./site and a config using it."""
    install_plugin(ECHO, tmp_path / "site")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "old.txt").write_text("old")
    (tmp_path / "signoff.toml").write_text(CONFIG)
    return tmp_path


def env_for(project: Path) -> dict[str, str]:
    """This environment, with echo's directory on the path and its token set."""
    path = os.pathsep.join(filter(None, [str(project / "site"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "ECHO_TOKEN": TOKEN}


def signoff(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "signoff", *args], check=False, cwd=project,
                          env=env_for(project), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_config_check_knows_the_plugin_section_and_its_channels(project: Path) -> None:
    """[echo] and `echo:` channels are accepted; a misspelt echo key is named, exit 2."""
    result = signoff(project, "config", "check", "signoff.toml")
    assert result.returncode == 0, result.stderr
    assert "surfaces: web, echo (channel approvals)" in result.stdout
    (project / "bad.toml").write_text(CONFIG.replace('channel = "approvals"',
                                                     'chanel = "approvals"'))
    result = signoff(project, "config", "check", "bad.toml")
    assert result.returncode == 2
    assert "bad.toml: echo.chanel: unknown key (did you mean 'channel'?)" in result.stderr


@pytest.fixture
def daemon(project: Path) -> Iterator[httpx.Client]:
    """`signoff daemon start` with echo configured, as a subprocess; a client for it."""
    port = free_port()
    with open(project / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "signoff", "daemon", "start", "--config", "signoff.toml",
             "--port", str(port), "--work-dir", str(project / "work")],
            cwd=project, env=env_for(project), stdout=subprocess.DEVNULL, stderr=log)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)

    def healthy() -> bool:
        assert proc.poll() is None, (project / "daemon.log").read_text()
        try:
            return client.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, "the daemon to answer /health")
        yield client
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_the_daemon_posts_to_the_plugin_surface_and_takes_its_decision(
        daemon: httpx.Client, project: Path) -> None:
    """The card reaches echo; a stranger is refused, echo:bob's "once" runs the action."""
    assert daemon.get("/health").json()["surfaces"]["echo"] == "ok"
    auth = {"X-Echo-Token": TOKEN}
    assert daemon.get("/echo/cards").status_code == 401, "echo checks its own callers"
    task_id = daemon.post("/tasks", json={"goal": "clean up", "steps": [
        {"tool": "delete_file", "args": {"path": "old.txt"}}]}).json()["id"]

    def card() -> dict[str, Any] | None:
        cards = daemon.get("/echo/cards", headers=auth).json()
        return cards[0] if cards else None

    posted = wait_for(card, "the card on echo")
    approval = daemon.get(f"/tasks/{task_id}").json()["approval"]
    assert posted["approval_id"] == approval["id"]
    assert posted["buttons"] == ["once", "session", "always", "deny"]

    def decide(user: str) -> dict[str, Any]:
        answer = daemon.post("/echo/decide", headers=auth, json={
            "message_id": posted["message_id"], "scope": "once", "user": user})
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    refused = decide("mallory")
    assert not refused["accepted"] and "Not authorized" in refused["message"]
    assert decide("bob")["accepted"]

    def completed() -> bool:
        return daemon.get(f"/tasks/{task_id}").json()["state"] == "completed"

    wait_for(completed, "the task to complete")
    assert not (project / "work" / "old.txt").exists()
    edited = wait_for(lambda: (c := card()) and c["status"] == "approved" and c, "the edit")
    assert "echo:bob" in edited["outcome"] and edited["buttons"] == []
    audit = daemon.get("/audit", params={"task": task_id}).json()["items"]
    actors = [(e["kind"], e["actor"]) for e in audit]
    assert ("refused", "echo:mallory") in actors and ("decision", "echo:bob") in actors

    def team_heard() -> bool:
        notes = daemon.get("/echo/notes", headers=auth).json()
        return any(n["channel"] == "team" and "completed" in n["text"] for n in notes)

    wait_for(team_heard, "the team channel on echo to hear the task completed")


def test_post_message_reaches_the_plugin_surface_by_its_prefix(
        daemon: httpx.Client) -> None:
    """post_message to echo:news, approved on echo, lands in echo's notes; a channel that
    is not in echo's own form fails before anyone is asked."""
    auth = {"X-Echo-Token": TOKEN}
    bad = daemon.post("/tasks", json={"goal": "announce", "steps": [
        {"tool": "post_message", "args": {"channel": "echo:News!", "text": "hi"}}]}).json()["id"]
    failed = wait_for(lambda: (t := daemon.get(f"/tasks/{bad}").json())["state"] == "failed"
                      and t, "the malformed post to fail")
    assert "is not a lowercase name such as 'echo:team'" in failed["result"]["reason"]
    assert daemon.get("/echo/cards", headers=auth).json() == []

    task_id = daemon.post("/tasks", json={"goal": "announce", "steps": [
        {"tool": "post_message", "args": {"channel": "echo:news", "text": "v2 is out"}}]}
    ).json()["id"]
    card = wait_for(lambda: daemon.get("/echo/cards", headers=auth).json(), "the card")[0]
    answer = daemon.post("/echo/decide", headers=auth, json={
        "message_id": card["message_id"], "scope": "once", "user": "bob"})
    assert answer.json()["accepted"]
    wait_for(lambda: daemon.get(f"/tasks/{task_id}").json()["state"] == "completed",
             "the post to complete")
    notes = daemon.get("/echo/notes", headers=auth).json()
    assert {"channel": "news", "text": "v2 is out", "thread": None} in notes
