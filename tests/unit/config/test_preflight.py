"""`signoff.config.preflight`: the checks daemon start, config check and handle share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from signoff.config import preflight
from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.wiring import build_registry


def problems(data: dict[str, Any], **kwargs: Any) -> list[str]:
    settings = Settings.model_validate(data)
    return preflight.problems(settings, build_registry(settings), path="s.toml", **kwargs)


def test_smart_mode_without_a_judge_endpoint_is_a_config_error() -> None:
    """approvals.mode = "smart" with no [planner] endpoint names file and key, not a
    silent manual mode."""
    [line] = problems({"approvals": {"mode": "smart"}})
    assert line.startswith('s.toml: approvals.mode: "smart" needs a judge endpoint')
    judged = {"approvals": {"mode": "smart"},
              "planner": {"base_url": "http://127.0.0.1:11434/v1", "model": "qwen2.5:7b"}}
    assert problems(judged) == []


def test_a_public_host_needs_a_key_unless_nothing_listens() -> None:
    """A non-loopback host without a key is a problem for the daemon, not for handle."""
    public = {"daemon": {"host": "0.0.0.0"}}
    [line] = problems(public)
    assert line.startswith("s.toml: daemon.host: refusing to listen on 0.0.0.0")
    assert problems(public, serving=False) == []
    assert problems({**public, "api": {"key": "k-0123456789abcdefghijkl"}}) == []
    [flag] = problems({}, host="::")
    assert flag.startswith("--host ::: refusing")


def test_recipe_placeholders_count_as_present_arguments() -> None:
    """A recipe's `{goal}` placeholders are strings: the step is complete."""
    recipe = {"name": "note", "match": "note (?P<name>\\w+)",
              "steps": [{"tool": "write_file", "args": {"path": "{name}.txt",
                                                        "content": "{goal}"}}]}
    assert problems({"recipes": [recipe]}) == []


def test_check_raises_one_error_with_every_line(tmp_path: Path) -> None:
    """check() raises a single ConfigError holding each problem on its own line."""
    settings = Settings.model_validate({"daemon": {"host": "0.0.0.0"},
                                        "approvals": {"mode": "smart"}})
    with pytest.raises(ConfigError) as caught:
        preflight.check(settings, build_registry(settings), path=None)
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    assert all(line.startswith(("(embedded defaults): ",)) for line in lines)


def test_a_schedule_prohibit_that_names_nothing_is_a_config_error() -> None:
    """A misspelt `[[schedules]] prohibit` entry would prohibit nothing in the schedule's
    unattended runs: the daemon refuses to start with it (as POST /tasks answers 422),
    while a tool, a capability, a risk class in any case, or an MCP server's tool pass."""
    def schedule(prohibit: list[str]) -> dict[str, Any]:
        return {"schedules": [{"name": "nightly", "every": "1h", "goal": "report",
                               "cron_mode": "approve", "prohibit": prohibit}]}

    [line] = problems(schedule(["send_mail"]))
    assert line.startswith("s.toml: schedules[0].prohibit[0]: 'send_mail' is not a risk "
                           "class, a tool or a capability here")
    assert "send_email" in line and line.endswith("so it would prohibit nothing")
    assert problems(schedule(["send_email", "email.send", "destructive", "SEND"])) == []
    mcp = {"mcp": {"servers": [{"name": "git", "command": ["git-mcp"]}]}}
    assert not [p for p in problems({**schedule(["git.push"]), **mcp}) if "prohibit" in p]
