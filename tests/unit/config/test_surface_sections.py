"""The config file's surface sections come from the registered surfaces: each one's
``[<name>]`` is validated by its own model, its channel prefix and user ids are what the
channel and approver checks accept, and a surface installed from another package (echo)
is configured exactly like Slack."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from signoff.config.settings import load_settings
from signoff.errors import ConfigError
from tests.plugins.install import ECHO, install_plugin

WriteConfig = Callable[[str], Path]
ECHO_SECTION = '[echo]\nchannel = "approvals"\ntoken = "t"\n'


@pytest.fixture
def write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WriteConfig:
    """Write config.toml in a fresh current directory and return its relative path."""
    monkeypatch.chdir(tmp_path)

    def write(text: str) -> Path:
        path = Path("config.toml")
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def echo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The echo surface package installed into a directory on sys.path."""
    monkeypatch.syspath_prepend(str(install_plugin(ECHO, tmp_path / "site")))


def error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


def test_built_in_approver_and_channel_messages_are_unchanged(write: WriteConfig) -> None:
    """The approver and channel errors list the built-in surfaces' forms (e-mail has
    approvers but no channels, and so has ntfy)."""
    assert error(write('[approvals]\napprovers = ["alice"]\n')) == (
        "config.toml: approvals.approvers[0]: invalid approver 'alice' (expected "
        "'discord:<user id>' such as 'discord:80351110224678912' or "
        "'email:<address>' such as 'email:alice@example.com' or "
        "'ntfy:<topic>' such as 'ntfy:alice-approvals' or "
        "'slack:<user id>' such as 'slack:U123' or 'teams:<AAD object id>' such as "
        "'teams:00000000-0000-0000-0000-0000000000a1' or 'telegram:<numeric user id>' such as "
        "'telegram:42')")
    assert error(write('[[notify]]\nchannel = "email:ops"\n')) == (
        "config.toml: notify[0].channel: invalid channel 'email:ops' (expected "
        "'discord:<channel id>' such as 'discord:1234567890123456789' or "
        "'slack:<channel id>' such as 'slack:C123' or 'teams:<conversation id>' such as "
        "'teams:19:abc@thread.tacv2' or 'telegram:<chat id>' such as 'telegram:-100123')")


def test_a_section_of_a_surface_not_installed_is_unknown(write: WriteConfig) -> None:
    """Without the echo package, [echo] is an unknown section."""
    assert error(write(ECHO_SECTION)).startswith("config.toml: echo: unknown section")


def test_an_installed_surface_brings_its_section_channels_and_approvers(
        write: WriteConfig, echo: None) -> None:
    """With echo installed: [echo] loads, echo:team is a channel, echo:bob an approver."""
    settings = load_settings(write(
        ECHO_SECTION + '[approvals]\napprovers = ["echo:bob", "slack:U1"]\n'
        '[[notify]]\nchannel = "echo:team"\n'))
    section = settings.surface("echo")
    assert section is not None and type(section).__name__ == "EchoSettings"
    assert dict(settings.surfaces) == {"echo": section}
    assert (settings.notify[0].platform, settings.notify[0].target) == ("echo", "team")
    assert settings.approvals.approvers == ["echo:bob", "slack:U1"]
    message = error(write('[approvals]\napprovers = ["echo:Bob!"]\n'))
    assert ("such as 'discord:80351110224678912' or 'echo:<name>' such as 'echo:bob' or "
            "'email:<address>'") in message


def test_an_installed_surface_is_checked_like_a_built_in_one(write: WriteConfig, echo: None) -> None:
    """Its misspelt keys and section are named, and its channels need its section."""
    assert error(write('[echo]\nchanel = "a"\ntoken = "t"\n')).splitlines() == [
        "config.toml: echo.channel: required key is missing",
        "config.toml: echo.chanel: unknown key (did you mean 'channel'?)"]
    assert error(write('[ecko]\nchannel = "a"\n')) == (
        "config.toml: ecko: unknown section (did you mean 'echo'?)")
    assert error(write('[[notify]]\nchannel = "echo:team"\n')) == (
        "config.toml: notify[0].channel: echo is not configured (add a [echo] section)")


def test_every_problem_is_reported_at_once(write: WriteConfig) -> None:
    """A bad surface section and a bad core key give one line each, together."""
    lines = error(write('[daemon]\nport = 0\n[slack]\nbot_token = "xoxb-1"\nchannel = "C1"\n'
                        '[telegram]\nbot_token = "1:A"\nchat_id = 1\nmode = "webhook"\n'))
    assert lines.splitlines() == [
        "config.toml: daemon.port: input should be greater than or equal to 1, got 0",
        "config.toml: slack.app_token: required in socket mode (an 'xapp-...' token)",
        "config.toml: telegram.webhook_secret: required in webhook mode"]


def test_a_plugin_that_fails_to_load_is_named_with_the_reason(
        write: WriteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A section of a registered surface whose package is broken says so, and why."""
    project = tmp_path / "broken"
    project.mkdir()
    (project / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "signoff-broken-surface"
        version = "0.1.0"
        [project.entry-points."signoff.surfaces"]
        broken = "signoff_no_such_module:PLUGIN"
        [tool.setuptools]
        packages = []
        """))
    monkeypatch.syspath_prepend(str(install_plugin(project, tmp_path / "site")))
    assert error(write('[broken]\nx = 1\n')) == (
        "config.toml: broken: the surface plug-in 'broken' could not be loaded "
        "(ModuleNotFoundError: No module named 'signoff_no_such_module')")
    assert load_settings(write("[daemon]\nport = 9\n")).daemon.port == 9, "the rest still loads"


def test_loading_chat_sections_imports_no_chat_sdk(tmp_path: Path) -> None:
    """[slack] and [telegram] are validated without importing slack_bolt or telegram."""
    config = tmp_path / "c.toml"
    config.write_text('[slack]\nbot_token = "xoxb-1"\napp_token = "xapp-1"\nchannel = "C1"\n'
                      '[telegram]\nbot_token = "1:A"\nchat_id = 1\n')
    code = ("import sys; from signoff.config.settings import check_config; "
            f"print(check_config({str(config)!r})); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('slack_bolt', 'slack_sdk', 'telegram', 'aiohttp')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)
    assert "surfaces: web, slack (socket), telegram (polling)" in result.stdout
    assert result.stdout.strip().endswith("[]"), result.stdout
