"""The ``[discord]`` section as an operator meets it: each missing key and a malformed
public key or id is named with what to put there, and `config check` lists the surface."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from signoff.config.settings import load_settings
from signoff.errors import ConfigError

KEY = "c0ffee" * 10 + "abcd"  # 64 hex characters
GOOD = (f'[discord]\napplication_id = "1100000000000000999"\npublic_key = "{KEY}"\n'
        'bot_token = "MTE.x"\nchannel_id = 1100000000000000001\n')


def error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


def test_a_valid_section_loads_with_ids_as_strings(tmp_path: Path) -> None:
    """A channel id written as a TOML number is kept exactly, as the string Discord uses."""
    path = tmp_path / "config.toml"
    path.write_text(GOOD + '[approvals]\napprovers = ["discord:80351110224678912"]\n'
                    '[[notify]]\nchannel = "discord:1100000000000000002"\n')
    settings = load_settings(path)
    section = settings.surface("discord")
    assert section is not None
    assert section.channel_id == "1100000000000000001"  # type: ignore[attr-defined]
    assert section.api_base == "https://discord.com/api/v10"  # type: ignore[attr-defined]
    assert settings.notify[0].target == "1100000000000000002"


def test_missing_keys_are_each_named(tmp_path: Path) -> None:
    """A [discord] section without its keys names every one that is missing."""
    lines = error(tmp_path, '[discord]\nbot_token = "MTE.x"\n').splitlines()
    for key in ("application_id", "public_key", "channel_id"):
        assert any(line.endswith(f"config.toml: discord.{key}: required key is missing")
                   for line in lines), key


def test_a_public_key_that_is_not_64_hex_characters_is_refused(tmp_path: Path) -> None:
    """The error says what the public key looks like and where to find it."""
    message = error(tmp_path, GOOD.replace(KEY, "not-a-key"))
    assert "discord.public_key" in message and "64 hexadecimal characters" in message


def test_ids_must_be_snowflakes(tmp_path: Path) -> None:
    """A channel name instead of its id is refused, saying how to copy the id."""
    message = error(tmp_path, GOOD.replace("channel_id = 1100000000000000001",
                                           'channel_id = "#approvals"'))
    assert "discord.channel_id" in message and "Copy ID" in message


def test_config_check_lists_discord_without_loading_the_surface(tmp_path: Path) -> None:
    """`config check`'s summary names the surface; the platform module is not imported."""
    config = tmp_path / "c.toml"
    config.write_text(GOOD)
    code = ("import sys; from signoff.config.settings import check_config; "
            f"print(check_config({str(config)!r})); "
            "print('signoff.adapters.discord.surface' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60)
    assert "discord (interactions)" in result.stdout
    assert result.stdout.strip().endswith("False"), result.stdout
