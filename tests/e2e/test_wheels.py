"""The distributions as a user installs them from an index: both wheels and sdists are
built with `python -m build`, `twine check` passes, and fresh virtualenvs get nothing but
a built wheel and what the index serves; a second one holds hermes-agent and the light
client, and `pip check` is clean there.

It builds and installs for a minute or more, so it runs once per CI run (``.ci/run`` sets
``SIGNOFF_WHEEL_SMOKE=1``), not in each `make test`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "signoff-client"
HERMES = "hermes-agent==0.19.0"  # the version the Hermes plugin is tested with

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("SIGNOFF_WHEEL_SMOKE") != "1",
                       reason="builds and installs wheels (~1-2 min): SIGNOFF_WHEEL_SMOKE=1"),
]


def run(*args: str | Path, cwd: Path = ROOT, timeout: float = 600) -> str:
    """Run a command; fail with its output when it exits non-zero."""
    result = subprocess.run([str(a) for a in args], check=False, cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels and sdists of both distributions, built from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    for project in (ROOT, CLIENT):
        run(sys.executable, "-m", "build", "--outdir", out, project)
    return out


def venv(path: Path) -> Path:
    """A fresh virtualenv; its bin folder."""
    run(sys.executable, "-m", "venv", path)
    return path / "bin"


def only(dist: Path, pattern: str) -> Path:
    [found] = sorted(dist.glob(pattern))
    return found


def test_both_distributions_build_and_pass_twine_check(dist: Path) -> None:
    """`python -m build` makes a wheel and an sdist of each, and `twine check` accepts them."""
    built = sorted(p.name for p in dist.iterdir())
    assert len(built) == 4, built
    out = run(sys.executable, "-m", "twine", "check", *sorted(dist.iterdir()))
    assert out.count("PASSED") == 4, out


def test_the_daemon_wheel_alone_installs_and_gates_a_task(dist: Path, tmp_path: Path) -> None:
    """A venv with only signoff's wheel (no signoff-client from an index) runs the CLI and a
    daemon that holds a gated step until it is approved."""
    bin_ = venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "--quiet", only(dist, "signoff-*.whl"))
    assert "daemon" in run(bin_ / "signoff", "--help")
    run(bin_ / "python", "-c", "from signoff.client import Signoff; import signoff_client")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "signoff.toml"
    config.write_text(f'[daemon]\nport = {port}\nwork_dir = "{tmp_path / "work"}"\n')
    log = (tmp_path / "daemon.log").open("wb")
    proc = subprocess.Popen([bin_ / "signoff", "daemon", "start", "--config", config],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        task_id = _submit_when_up(url, proc)
        _wait_status(url, task_id, "waiting_approval")
        r = httpx.post(f"{url}/tasks/{task_id}/approve", json={"scope": "once"}, timeout=30)
        assert r.status_code == 200, r.text
        _wait_status(url, task_id, "completed")
        assert (tmp_path / "work" / "hello.txt").exists() is False  # deleted once approved
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_the_light_client_installs_alone(dist: Path, tmp_path: Path) -> None:
    """signoff-client's wheel brings httpx and nothing of the daemon; `pip check` is clean."""
    bin_ = venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "--quiet", only(dist, "signoff_client-*.whl"))
    run(bin_ / "pip", "check")
    run(bin_ / "python", "-c", "from signoff_client import Signoff, NotApproved")
    names = run(bin_ / "pip", "list", "--format=freeze").lower()
    assert "fastapi" not in names and "signoff==" not in names, names


def test_the_light_client_wheel_joins_hermes_without_moving_its_pins(dist: Path,
                                                                     tmp_path: Path) -> None:
    """A venv with hermes-agent from the index and signoff-client's built wheel: installing
    the wheel moves none of Hermes' pins, `pip check` is clean, the plugin imports."""
    bin_ = venv(tmp_path / "venv")
    run(bin_ / "pip", "install", "--quiet", HERMES, timeout=1800)
    before = run(bin_ / "pip", "list", "--format=freeze").lower().splitlines()
    run(bin_ / "pip", "install", "--quiet", only(dist, "signoff_client-*.whl"))
    after = run(bin_ / "pip", "list", "--format=freeze").lower().splitlines()
    assert set(before) - set(after) == set(), "installing signoff-client moved Hermes' pins"
    assert [n for n in set(after) - set(before) if n.startswith("signoff-client==")], after
    run(bin_ / "pip", "check")
    run(bin_ / "python", "-c", "import signoff_client.hermes")


def _submit_when_up(url: str, proc: subprocess.Popen[bytes]) -> str:
    """Wait for /health, then submit a task: write a file (DRAFT), then delete it (gated)."""
    end = time.monotonic() + 90
    while time.monotonic() < end:
        assert proc.poll() is None, "the daemon exited"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    steps = [{"tool": "write_file", "args": {"path": "hello.txt", "content": "hi"}},
             {"tool": "delete_file", "args": {"path": "hello.txt"}}]
    r = httpx.post(f"{url}/tasks", json={"goal": "wheel smoke", "steps": steps}, timeout=30)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _wait_status(url: str, task_id: str, status: str) -> None:
    end = time.monotonic() + 60
    seen = None
    while time.monotonic() < end:
        seen = httpx.get(f"{url}/tasks/{task_id}", timeout=10).json()["state"]
        if seen == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} is {seen}, not {status}")
