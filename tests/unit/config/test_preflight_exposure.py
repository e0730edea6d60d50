"""A daemon reachable from other machines needs keys that cannot be guessed, and the
keyless mode never serves a public URL (issue 21: hole 10 and the access defaults)."""

from __future__ import annotations

from typing import Any

import pytest

from signoff.config import preflight
from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.wiring import api_roles, build_registry

LONG = "k-0123456789abcdefghijkl"  # 24 characters


def problems(data: dict[str, Any], **kwargs: Any) -> list[str]:
    settings = Settings.model_validate(data)
    return preflight.problems(settings, build_registry(settings), path="s.toml", **kwargs)


def test_keyless_with_a_public_url_off_this_machine_refuses_to_start() -> None:
    """No key and a non-loopback public_url (a reverse proxy in front) is a config error."""
    proxied = {"daemon": {"public_url": "https://signoff.example.com"}}
    [line] = problems(proxied)
    assert line.startswith("s.toml: daemon.public_url: https://signoff.example.com is not "
                           "on this machine")
    assert "set [api] key" in line
    settings = Settings.model_validate(proxied)
    with pytest.raises(ConfigError, match=r"daemon\.public_url"):
        preflight.check(settings, build_registry(settings), path="s.toml")
    assert problems({"daemon": {"public_url": "http://localhost:8080"}}) == []
    assert problems({**proxied, "api": {"key": LONG}}) == []


def test_short_keys_are_refused_off_loopback() -> None:
    """Off loopback every key needs 22 characters; the error names the key's holder."""
    keys = {"key": LONG, "keys": [{"name": "ci", "key": "short-key-123"}]}
    [line] = problems({"daemon": {"host": "0.0.0.0"}, "api": keys})
    assert line.startswith("s.toml: api.keys[0].key: the key of 'ci' is 13 characters")
    assert "at least 22" in line
    [admin] = problems({"daemon": {"public_url": "https://s.example.com"},
                        "api": {"key": "abc"}})
    assert admin.startswith("s.toml: api.key: the key of 'admin' is 3 characters")
    [flag] = problems({"api": keys}, host="192.0.2.1")
    assert "'ci'" in flag
    assert problems({"api": keys}) == []  # loopback only: a short key is the owner's choice


def test_key_roles_default_to_approver_and_are_checked() -> None:
    """A [[api.keys]] entry without role is an approver; [api] key is admin; a bad role
    or a name that is taken is refused naming the key."""
    settings = Settings.model_validate({"api": {"key": LONG, "keys": [
        {"name": "bob", "key": LONG + "b"},
        {"name": "agent", "key": LONG + "a", "role": "requester"}]}})
    assert api_roles(settings) == {"admin": "admin", "bob": "approver", "agent": "requester"}
    with pytest.raises(Exception, match=r"keys\.0\.role|keys\[0\]\.role"):
        Settings.model_validate({"api": {"keys": [{"name": "x", "key": LONG,
                                                   "role": "root"}]}})
    with pytest.raises(Exception, match="taken by"):
        Settings.model_validate({"api": {"key": LONG, "keys": [{"name": "admin",
                                                                "key": LONG + "x"}]}})


def test_a_key_listed_twice_is_refused() -> None:
    """Two entries with one key would make a requester act as whoever came first."""
    with pytest.raises(Exception, match="same key as another entry"):
        Settings.model_validate({"api": {"key": LONG, "keys": [
            {"name": "agent", "key": LONG, "role": "requester"}]}})
