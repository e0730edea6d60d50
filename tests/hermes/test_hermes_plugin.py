"""The Hermes Agent plugin, loaded by the real hermes-agent 0.19.0 in its own virtualenv.

The virtualenv is made once and cached (``~/.cache/signoff-tests/hermes-0.19.0``, or
``$SIGNOFF_TEST_CACHE``); each run reinstalls this repo's ``signoff-client`` into it with
its dependencies and checks that no pinned version of Hermes moved. The plugin is
enabled with Hermes' own ``hermes plugins enable signoff``, loaded by Hermes' plugin
loader, and every answer below comes from Hermes' own ``resolve_pre_tool_block`` — the
function each Hermes tool dispatch calls — talking over HTTP to a daemon app on uvicorn.

Without a package index that serves hermes-agent 0.19.0 these tests are skipped with the
reason; ``SIGNOFF_REQUIRE_HERMES=1`` (set by .ci/run) turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.api.helpers import BOB_KEY, Running, eventually, make_settings, running_node, serve

pytestmark = [pytest.mark.hermes, pytest.mark.slow]

HERMES = "hermes-agent==0.19.0"
REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "clients" / "signoff-client"
DRIVER = Path(__file__).with_name("driver.py")
INSTALL_TIMEOUT = 1800


def _unavailable(reason: str) -> None:
    if os.environ.get("SIGNOFF_REQUIRE_HERMES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)


def _tail(result: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in (result.stdout + result.stderr).splitlines()
             if ln.strip() and not ln.startswith("WARNING: Location")]
    return " | ".join(lines[-4:])


def _freeze(venv: Path) -> dict[str, str]:
    """name -> version (or where it was installed from) of every installed distribution."""
    out = _pip(venv, "freeze", "--all").stdout.splitlines()
    pairs = [line.split("==", 1) if "==" in line else line.split(" @ ", 1)
             for line in out if "==" in line or " @ " in line]
    return {name.strip().lower(): version.strip() for name, version in pairs}


@pytest.fixture(scope="session")
def hermes_venv() -> Iterator[Path]:
    """Hermes Agent's own virtualenv (cached between runs) with this signoff-client."""
    cache = Path(os.environ.get("SIGNOFF_TEST_CACHE", "~/.cache/signoff-tests")).expanduser()
    venv = cache / "hermes-0.19.0"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "hermes-0.19.0.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs never build it at once
        if not (venv / ".ready").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                           timeout=300)
            result = _pip(venv, "install", "--quiet", HERMES)
            if result.returncode != 0:
                _unavailable(f"cannot install {HERMES} from the package index (no network?): "
                             f"{_tail(result)}")
            (venv / ".ready").write_text(HERMES + "\n")
        before = _freeze(venv)
        result = _pip(venv, "install", "--quiet", "--force-reinstall", "--no-deps", str(CLIENT))
        if result.returncode == 0:  # and once more with its dependencies: nothing may move
            result = _pip(venv, "install", "--quiet", str(CLIENT))
        if result.returncode != 0:
            _unavailable(f"cannot install signoff-client into Hermes' env: {_tail(result)}")
        after = _freeze(venv)
    moved = {name: (before.get(name), version) for name, version in after.items()
             if name != "signoff-client" and before.get(name) != version}
    assert moved == {}, f"installing signoff-client changed Hermes' pins: {moved}"
    assert "signoff-client" in after
    yield venv


@pytest.fixture(scope="module")
def hermes_home(hermes_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A HERMES_HOME where `hermes plugins enable signoff` enabled the plugin."""
    home = tmp_path_factory.mktemp("hermes-home")
    env = {**os.environ, "HERMES_HOME": str(home)}
    result = subprocess.run([str(hermes_venv / "bin" / "hermes"), "plugins", "enable",
                             "signoff"], env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=300, check=False)
    config = (home / "config.yaml").read_text() if (home / "config.yaml").exists() else ""
    assert "signoff" in config, f"hermes plugins enable failed: {result.stdout}{result.stderr}"
    return home


@dataclass
class Hermes:
    """Hermes' plugin loader and pre-tool gate in a subprocess, one call at a time."""

    proc: asyncio.subprocess.Process
    plugins: list[dict[str, Any]]

    async def ask(self, tool: str, args: dict[str, Any], *, session: str = "s-hermes",
                  call: str = "c-1") -> asyncio.Task[str | None]:
        """Start one tool call through resolve_pre_tool_block; its task gives the block
        message (None: the call may run)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = json.dumps({"tool": tool, "args": args, "session": session, "call": call})
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        stdout = self.proc.stdout

        async def answer() -> str | None:
            raw = await asyncio.wait_for(stdout.readline(), timeout=120)
            reply = json.loads(raw)
            assert reply["call"] == call
            block: str | None = reply["block"]
            return block

        return asyncio.create_task(answer())


@contextlib.asynccontextmanager
async def hermes(venv: Path, home: Path, url: str, **env: str) -> AsyncIterator[Hermes]:
    """Run the driver in Hermes' virtualenv, talking to the daemon at ``url``."""
    environment = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""),
                   "HERMES_HOME": str(home), "SIGNOFF_URL": url,
                   # Hermes asks with its own key; the admin who decides never asked.
                   "SIGNOFF_API_KEY": BOB_KEY, **env}
    proc = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "python"), str(DRIVER), env=environment, cwd=str(home),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    first = json.loads(await asyncio.wait_for(proc.stdout.readline(), timeout=300))
    try:
        yield Hermes(proc, first["plugins"])
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout=20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Running, str]]:
    """A node with `ls -la` as a read-only command, served on uvicorn."""
    settings = make_settings(tmp_path, policy={"read_only_commands": ["ls -la"]})
    async with running_node(tmp_path, settings=settings) as node, serve(node.app) as url:
        yield node, url


async def pending(node: Running) -> list[dict[str, Any]]:
    async with node.client() as client:
        items: list[dict[str, Any]] = (await client.get("/approvals")).json()["items"]
        return items


async def one_pending(node: Running) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    async def some() -> bool:
        found[:] = await pending(node)
        return bool(found)

    await eventually(some, timeout=60, what="the plugin's request")
    return found[0]


async def decide(node: Running, approval_id: str, verb: str, **body: Any) -> None:
    async with node.client() as client:
        answer = await client.post(f"/approvals/{approval_id}/{verb}", json=body)
        assert answer.status_code == 200, answer.text


async def test_hermes_loads_the_plugin_through_its_own_loader(
        hermes_venv: Path, hermes_home: Path, daemon: tuple[Running, str]) -> None:
    """Hermes finds the entry point, the plugin is enabled and registered one hook."""
    _, url = daemon
    async with hermes(hermes_venv, hermes_home, url) as h:
        [ours] = [p for p in h.plugins if p["name"] == "signoff"]
    assert ours["enabled"] is True and ours["source"] == "entrypoint"
    assert ours["hooks"] == 1 and ours["error"] is None


async def test_an_approved_terminal_call_proceeds(hermes_venv: Path, hermes_home: Path,
                                                  daemon: tuple[Running, str]) -> None:
    """terminal waits for a person (a card with the exact command and cwd, the Hermes
    session as policy_id); once approved for the session Hermes runs it, and the same
    command in the same session runs without asking again."""
    node, url = daemon
    args = {"command": "git push origin main", "workdir": "/srv/app"}
    async with hermes(hermes_venv, hermes_home, url) as h:
        answer = await h.ask("terminal", args, session="s-42", call="c-1")
        request = await one_pending(node)
        assert request["task_id"] is None and request["policy_id"] == "s-42"
        assert request["requester"].startswith("hermes:")
        action = request["action"]
        assert action["tool"] == "run_command" and action["risk"] == "DESTRUCTIVE"
        assert action["targets"] == ["git push origin main", "cwd: /srv/app"]
        assert not answer.done()
        await decide(node, request["id"], "approve", scope="session")
        assert await answer is None
        again = await h.ask("terminal", args, session="s-42", call="c-2")
        assert await again is None
        assert await pending(node) == []


async def test_a_denied_call_is_blocked_with_a_message(hermes_venv: Path, hermes_home: Path,
                                                       daemon: tuple[Running, str]) -> None:
    """Denied on signoff: Hermes blocks the call with signoff's message."""
    node, url = daemon
    async with hermes(hermes_venv, hermes_home, url) as h:
        answer = await h.ask("send_message", {"target": "telegram:-100", "message": "hi"},
                             call="c-deny")
        request = await one_pending(node)
        assert request["action"]["risk"] == "SEND"
        await decide(node, request["id"], "deny", reason="not to that group")
        message = await answer
    assert message is not None
    assert message.startswith("signoff: not approved: denied by web:admin")
    assert "not to that group" in message


async def test_a_stopped_daemon_blocks_every_call(hermes_venv: Path, hermes_home: Path,
                                                  tmp_path: Path) -> None:
    """The daemon stops: even a READ call is blocked (fail closed), with a message."""
    async with running_node(tmp_path) as node:
        async with serve(node.app) as url:
            pass  # served, then stopped: nothing listens on the port any more
        async with hermes(hermes_venv, hermes_home, url) as h:
            message = await (await h.ask("read_file", {"path": "notes.txt"}, call="c-down"))
    assert message is not None and message.startswith("signoff: not approved:")
    assert "unreachable" in message


async def test_read_only_calls_run_at_once_without_a_card(
        hermes_venv: Path, hermes_home: Path, daemon: tuple[Running, str]) -> None:
    """read_file and a terminal command in policy.read_only_commands run without asking:
    no pending request, no card."""
    node, url = daemon
    async with hermes(hermes_venv, hermes_home, url) as h:
        assert await (await h.ask("read_file", {"path": "README.md"}, call="c-r1")) is None
        assert await (await h.ask("terminal", {"command": "ls -la"}, call="c-r2")) is None
    assert await pending(node) == []
    await node.node.flow.dispatcher.run_once()
    async with node.client() as client:
        events = (await client.get("/audit", params={"limit": 100})).json()["items"]
    settled = [(e["tool"], e["decision"], e["risk"]) for e in events]
    assert settled == [("hermes.read_file", "ALLOW", "READ"), ("run_command", "ALLOW", "READ")]
    assert all(node.web.card(e["approval_id"]) is None for e in events)
