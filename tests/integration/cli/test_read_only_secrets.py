"""Read-only commands (`oncall`, `schedules`, `audit`, `tools`, `nodes`) work on a config
whose chat tokens, SMTP password and model API key are `${ENV}` references that are not
set in this shell; `daemon start`
and `config check`, which need the tokens, still refuse clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from signoff.cli.main import _register_extras, app
from signoff.config.settings import load_settings

SECRETS = ("SIGNOFF_T_SLACK_BOT", "SIGNOFF_T_SLACK_APP", "SIGNOFF_T_SMTP", "SIGNOFF_T_LLM")

CONFIG = """
[daemon]
work_dir = "{work}"
state_dir = "{state}"

[slack]
bot_token = "${{SIGNOFF_T_SLACK_BOT}}"
app_token = "${{SIGNOFF_T_SLACK_APP}}"
channel = "C0APPROVALS"

[email]
host = "smtp.example.com"
username = "signoff"
password = "${{SIGNOFF_T_SMTP}}"

[planner]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "m"
api_key = "${{SIGNOFF_T_LLM}}"

[[notify]]
channel = "slack:C0TEAM"
events = ["failed"]

[[schedules]]
name = "nightly"
cron = "0 3 * * *"
steps = [{{ tool = "list_dir", args = {{ path = "." }} }}]

[[oncall.rotations]]
name = "primary"
members = ["slack:UA"]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A config file whose Slack tokens come from two unset variables."""
    work = tmp_path / "work"
    work.mkdir()
    path = tmp_path / "signoff.toml"
    path.write_text(CONFIG.format(work=work, state=tmp_path / "state"))
    code, output = run("schedules", "run", "nightly", "--config", str(path))
    assert code == 0, output  # the database now exists, with one task in it
    return path


def run(*args: str) -> tuple[int, str]:
    _register_extras()
    result = CliRunner().invoke(app, list(args), env=dict.fromkeys(SECRETS))
    return result.exit_code, result.output


@pytest.mark.parametrize("command", [["oncall"], ["schedules"], ["audit"], ["tools"],
                                     ["nodes"], ["config", "show"]])
def test_read_only_commands_need_no_chat_secrets(config: Path, command: list[str]) -> None:
    """`signoff oncall` & co. answer although SIGNOFF_T_SLACK_BOT is not set."""
    where = [str(config)] if command[0] == "config" else ["--config", str(config)]
    code, output = run(*command, *where)
    assert code == 0, output


def test_the_set_aside_section_says_why(config: Path) -> None:
    """A read-only load leaves [slack] out and names the missing variables."""
    settings = load_settings(config, chat=False, environ={})
    assert settings.slack is None
    assert settings.unresolved["slack"][0].startswith(
        "slack.bot_token: environment variable SIGNOFF_T_SLACK_BOT is not set")


def test_a_set_secret_is_used_by_a_read_only_load(config: Path) -> None:
    """With the variables set, the read-only load has the whole [slack], [email] and
    [planner] sections; without the SMTP and model secrets, those two are set aside."""
    settings = load_settings(config, chat=False, environ={
        "SIGNOFF_T_SLACK_BOT": "xoxb-1", "SIGNOFF_T_SLACK_APP": "xapp-1",
        "SIGNOFF_T_SMTP": "pw", "SIGNOFF_T_LLM": "sk-1"})
    assert settings.slack is not None and settings.slack.bot_token == "xoxb-1"
    assert settings.email.password == "pw" and settings.planner.api_key == "sk-1"
    assert dict(settings.unresolved) == {}
    partial = load_settings(config, chat=False, environ={
        "SIGNOFF_T_SLACK_BOT": "xoxb-1", "SIGNOFF_T_SLACK_APP": "xapp-1"})
    assert set(partial.unresolved) == {"email", "planner"}
    assert partial.email.password is None and partial.slack is not None


def test_config_check_still_names_the_missing_secret(config: Path) -> None:
    """`config check` exits 2 naming the key and the unset variable."""
    code, output = run("config", "check", str(config))
    assert code == 2
    assert "slack.bot_token: environment variable SIGNOFF_T_SLACK_BOT is not set" in output


def test_daemon_start_still_refuses_without_the_secret(config: Path) -> None:
    """`daemon start` exits 2 before starting anything when a token is unset."""
    code, output = run("daemon", "start", "--config", str(config))
    assert code == 2
    assert "SIGNOFF_T_SLACK_APP is not set" in output


def test_config_show_masks_secrets_and_names_what_it_left_out(config: Path) -> None:
    """Unset tokens: [slack] says why it is not loaded; set: the tokens show as ***."""
    code, output = run("config", "show", str(config))
    assert code == 0, output
    shown = json.loads(output)
    assert "SIGNOFF_T_SLACK_BOT is not set" in shown["slack"]["not loaded"][0]
    _register_extras()
    result = CliRunner().invoke(app, ["config", "show", str(config)], env={
        "SIGNOFF_T_SLACK_BOT": "xoxb-very-secret", "SIGNOFF_T_SLACK_APP": "xapp-secret-too"})
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["slack"]["bot_token"] == "***" and shown["slack"]["app_token"] == "***"
    assert shown["slack"]["channel"] == "C0APPROVALS"
    assert "very-secret" not in result.output and "secret-too" not in result.output
