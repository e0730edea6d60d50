"""`[[mcp.servers]]` in the config file: defaults, mistakes named by key, and the check
that a stdio server's command can start."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from signoff.config import preflight
from signoff.config.settings import check_config, load_settings
from signoff.errors import ConfigError
from signoff.runtime.models import RiskClass
from signoff.runtime.tools.registry import builtin_registry
from signoff.wiring import mcp_specs

GIT = f'''
[[mcp.servers]]
name = "git"
command = ["{sys.executable}", "-m", "mcp_server_git", "--repository", "/srv/repo"]
[mcp.servers.tools.git_status]
risk = "read"
capability = "git.read"
targets = ["repo_path"]
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "signoff.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        check_config(path)
    return str(info.value)


def test_a_server_with_its_tool_rules_loads_with_the_contract_defaults(tmp_path: Path) -> None:
    """default_risk DESTRUCTIVE, untrusted annotations, rules as written."""
    settings = load_settings(write(tmp_path, GIT))
    (spec,) = mcp_specs(settings)
    assert spec.name == "git" and spec.command[1:3] == ("-m", "mcp_server_git")
    assert spec.default_risk is RiskClass.DESTRUCTIVE and spec.trust_annotations is False
    rule = spec.tools["git_status"]
    assert rule.risk is RiskClass.READ and rule.capability == "git.read"
    assert rule.targets == ("repo_path",) and rule.content == ()


def test_an_http_server_needs_a_url_and_no_command(tmp_path: Path) -> None:
    """url alone is a streamable-HTTP server; both or neither is an error naming the key."""
    ok = load_settings(write(tmp_path, '[[mcp.servers]]\nname = "h"\nurl = "http://127.0.0.1:9/mcp"\n'))
    assert mcp_specs(ok)[0].url == "http://127.0.0.1:9/mcp"
    neither = error_of(write(tmp_path, '[[mcp.servers]]\nname = "h"\n'))
    assert "mcp.servers['h'].command" in neither
    both = error_of(write(tmp_path, '[[mcp.servers]]\nname = "h"\ncommand = ["x"]\n'
                                    'url = "http://127.0.0.1:9/mcp"\n'))
    assert "mcp.servers['h'].url" in both and "not both" in both


@pytest.mark.parametrize("name", ["a.b", "a__b", "", "git_", "-x"])
def test_a_server_name_that_cannot_prefix_tool_names_is_refused(tmp_path: Path,
                                                                name: str) -> None:
    """Dots and double underscores would make '<server>.<tool>' ambiguous."""
    message = error_of(write(tmp_path, f'[[mcp.servers]]\nname = "{name}"\ncommand = ["x"]\n'))
    assert "mcp.servers[0].name" in message


def test_duplicate_servers_and_unknown_keys_are_named(tmp_path: Path) -> None:
    """Two servers called git; a typo in a tool rule."""
    message = error_of(write(tmp_path, GIT + GIT))
    assert "mcp.servers[1].name: duplicate server name 'git'" in message
    message = error_of(write(tmp_path, GIT.replace('risk = "read"', 'risky = "read"')))
    assert "mcp.servers['git'].tools.git_status.risky: unknown key (did you mean 'risk'?)" in message


def test_a_target_cannot_also_be_content(tmp_path: Path) -> None:
    """A target is always part of the fingerprint, so it cannot be left out as content."""
    message = error_of(write(tmp_path, GIT + 'content = ["repo_path"]\n'))
    assert "mcp.servers['git'].tools.git_status.content" in message


def test_config_check_names_a_server_whose_command_cannot_start(tmp_path: Path) -> None:
    """An executable not on PATH: the file, the key and why; nothing is started."""
    text = '[[mcp.servers]]\nname = "gh"\ncommand = ["no-such-mcp-server-xyz", "--stdio"]\n'
    path = write(tmp_path, text)
    found = preflight.problems(load_settings(path), builtin_registry(entry_points_group=None),
                               path=path)
    message = "\n".join(found)
    assert "signoff.toml: mcp.servers['gh'].command" in message
    assert "'no-such-mcp-server-xyz': not found on PATH" in message


def test_config_check_uses_the_servers_own_path(tmp_path: Path) -> None:
    """env.PATH of the server is where its command is looked up."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "my-server"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    text = (f'[[mcp.servers]]\nname = "mine"\ncommand = ["my-server"]\n'
            f'env = {{ PATH = "{bin_dir}" }}\n')
    summary = check_config(write(tmp_path, text))
    assert f"mine (stdio my-server -> {program}; found, not started)" in summary


def test_config_check_lists_a_startable_server(tmp_path: Path) -> None:
    """A command that exists is reported as found and not started."""
    summary = check_config(write(tmp_path, GIT))
    assert f"mcp servers: git (stdio {sys.executable} -> {sys.executable}; found, not started)" \
        in summary
