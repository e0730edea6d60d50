"""`signoff tools`: every tool with its risk, capability and source."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from signoff.cli.tools import register
from signoff.runtime.models import RiskClass
from signoff.runtime.tools.registry import builtin_registry
from tests.factories import NoopTool

app = typer.Typer()
register(app)
app.command("noop-placeholder", hidden=True)(lambda: None)  # keep `tools` a sub-command


def test_json_lists_the_builtins_with_their_risk_and_source(tmp_path: Path) -> None:
    """--json: one object per tool with name, risk, capability and source "builtin"."""
    config = tmp_path / "signoff.toml"
    config.write_text(f'[daemon]\nwork_dir = "{tmp_path}"\n'
                      '[policy]\nread_only_commands = ["ls -la"]\n')
    result = CliRunner().invoke(app, ["tools", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    tools = {t["name"]: t for t in json.loads(result.stdout)}
    assert set(tools) == {"read_file", "list_dir", "http_get", "write_file", "send_webhook",
                          "send_email", "post_message", "delete_file", "run_command"}
    assert tools["read_file"] == {"name": "read_file", "risk": "READ",
                                  "capability": "fs.read", "source": "builtin"}
    assert tools["send_email"]["risk"] == "SEND"
    assert tools["write_file"]["risk"] == "DRAFT"
    assert tools["run_command"] == {"name": "run_command", "risk": "DESTRUCTIVE",
                                    "capability": "exec.shell", "source": "builtin"}


def test_table_has_one_line_per_tool() -> None:
    """Without --json: a table with each tool on one line."""
    result = CliRunner().invoke(app, ["tools"], env={"COLUMNS": "200", "SIGNOFF_CONFIG": ""})
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if "delete_file" in ln)
    assert "DESTRUCTIVE" in line and "fs.delete" in line and "builtin" in line


def test_a_plugin_tool_is_listed_as_plugin() -> None:
    """A tool registered after the built-ins (an entry point) has source "plugin"."""
    registry = builtin_registry(entry_points_group=None)
    registry.register(NoopTool(name="team.ping", capability="team.ping", risk=RiskClass.SEND))
    [info] = [t for t in registry.listing() if t.name == "team.ping"]
    assert info.public() == {"name": "team.ping", "risk": "SEND", "capability": "team.ping",
                             "source": "plugin"}
