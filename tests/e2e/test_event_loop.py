"""The daemon's event loop (``daemon.event_loop``): uvloop by default, asyncio's own when
the config asks, a clear refusal when uvloop is asked for and missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from signoff.errors import ConfigError
from signoff.wiring import event_loop
from tests.e2e.daemons import DaemonProcess, wait_for


@pytest.mark.parametrize(("choice", "loop"), [(None, "uvloop"), ("asyncio", "asyncio")])
def test_the_daemon_runs_its_tasks_on_the_loop_it_names(tmp_path: Path, choice: str | None,
                                                        loop: str) -> None:
    """A real daemon says which loop it runs on when it starts, and works on it: a task
    of two steps runs to the end."""
    daemon = DaemonProcess(tmp_path, daemon={"event_loop": choice} if choice else None)
    (daemon.work / "notes.txt").write_text("hello")
    daemon.start()
    try:
        assert f"event_loop={loop}" in daemon.log_text()
        task_id = daemon.submit([{"tool": "list_dir", "args": {"path": "."}},
                                 {"tool": "read_file", "args": {"path": "notes.txt"}}])
        wait_for(lambda: daemon.task(task_id)["state"] == "completed", "the task to finish")
    finally:
        daemon.stop()


def test_uvloop_asked_for_by_name_and_missing_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without uvloop, "uvloop" refuses to start, naming the setting and the fix; "auto"
    quietly takes asyncio's loop."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what `import uvloop` does without it
    with pytest.raises(ConfigError, match=r'daemon\.event_loop = "uvloop".*pip install uvloop'):
        event_loop.loop_factory("uvloop")
    assert event_loop.loop_factory("auto") is None


def test_an_unknown_event_loop_is_a_config_error(tmp_path: Path) -> None:
    """A typo in daemon.event_loop is named by `signoff config check`, not ignored."""
    import subprocess

    config = tmp_path / "signoff.toml"
    config.write_text('[daemon]\nevent_loop = "uv"\n')
    out = subprocess.run([sys.executable, "-m", "signoff", "config", "check", str(config)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         check=False)
    assert out.returncode != 0
    assert "event_loop" in out.stdout + out.stderr
