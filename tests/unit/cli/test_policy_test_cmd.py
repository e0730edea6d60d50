"""`signoff policy test` and `config check` with a Cedar policy file."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from signoff.cli.policy_cmd import register
from signoff.config import preflight
from signoff.config.settings import load_settings
from signoff.wiring import build_registry

app = typer.Typer()
register(app)
app.command("noop-placeholder", hidden=True)(lambda: None)  # keep `policy` a sub-command

POLICY = """
@id("alice-mail")
permit(principal == Signoff::Principal::"web:alice", action == Signoff::Action::"send_email",
       resource) when { resource.name like "*@example.com" };
@id("no-prod")
forbid(principal, action, resource) when { resource.name like "*prod*" };
@id("nightly-cleanup")
permit(principal == Signoff::Principal::"schedule:nightly",
       action == Signoff::Action::"delete_file", resource);
"""
MAIL = {"to": "bob@example.com", "subject": "hi", "body": "x"}


def config(tmp_path: Path, policy: str = POLICY) -> Path:
    """A config naming a Cedar file; the daemon's dirs in tmp_path."""
    (tmp_path / "policy.cedar").write_text(policy, encoding="utf-8")
    path = tmp_path / "signoff.toml"
    path.write_text(f'[daemon]\nwork_dir = "{tmp_path / "work"}"\n'
                    f'state_dir = "{tmp_path / "state"}"\n'
                    f'[policy]\ncedar = "{tmp_path / "policy.cedar"}"\n', encoding="utf-8")
    return path


def run(*args: str) -> tuple[int, str]:
    """Exit code and output of `signoff policy test ARGS`."""
    result = CliRunner().invoke(app, ["policy", "test", *args])
    return result.exit_code, result.output


def test_it_prints_the_decision_and_the_policy_that_made_it(tmp_path: Path) -> None:
    """ALLOW by alice-mail for alice; the plain built-in ASK_USER for bob."""
    path = str(config(tmp_path))
    code, out = run("-c", path, "--tool", "send_email", "--args", json.dumps(MAIL),
                    "--requester", "web:alice")
    assert code == 0, out
    assert "decision: ALLOW" in out and "policies: alice-mail" in out
    assert "targets: bob@example.com" in out and "without the daemon's live grants" in out
    code, out = run("-c", path, "--tool", "send_email", "--args", json.dumps(MAIL),
                    "--requester", "web:bob")
    assert "decision: ASK_USER" in out and "(none: the built-in rules)" in out


def test_json_forbid_and_schedule_principal(tmp_path: Path) -> None:
    """--json: a forbidden recipient is BLOCK by no-prod; schedule:nightly is permitted its
    deletions, schedule:weekly is not."""
    path = str(config(tmp_path))
    code, out = run("-c", path, "--tool", "send_email", "--json", "--args",
                    json.dumps({**MAIL, "to": "ops@prod.example.com"}), "--requester", "web:alice")
    assert code == 0, out
    found = json.loads(out)
    assert (found["decision"], found["policies"]) == ("BLOCK", ["no-prod"])
    assert found["risk"] == "SEND" and found["targets"] == ["ops@prod.example.com"]
    delete = json.dumps({"path": "old.txt"})
    nightly = json.loads(run("-c", path, "--tool", "delete_file", "--args", delete, "--json",
                             "--requester", "schedule:nightly")[1])
    weekly = json.loads(run("-c", path, "--tool", "delete_file", "--args", delete, "--json",
                            "--requester", "schedule:weekly")[1])
    assert nightly["decision"] == "ALLOW" and weekly["decision"] == "ASK_USER"


def test_bad_input_is_one_clear_line(tmp_path: Path) -> None:
    """Arguments that are not a JSON object, and an unknown tool, exit 2 naming the problem."""
    path = str(config(tmp_path))
    code, out = run("-c", path, "--tool", "send_email", "--args", "[1]")
    assert code == 2 and "--args must be a JSON object" in out
    code, out = run("-c", path, "--tool", "send_email", "--args", "{nope")
    assert code == 2 and "--args is not JSON" in out
    code, out = run("-c", path, "--tool", "send_emial", "--args", "{}")
    assert code == 2 and "send_emial" in out


def test_config_check_refuses_a_broken_policy_file_naming_it(tmp_path: Path) -> None:
    """A file that is not Cedar is a config problem naming policy.cedar and the file."""
    path = config(tmp_path, policy="permit(principal, action")
    settings = load_settings(path)
    found = preflight.problems(settings, build_registry(settings), path=path)
    assert any("policy.cedar" in line and "not valid Cedar" in line for line in found), found
    (tmp_path / "policy.cedar").unlink()
    found = preflight.problems(settings, build_registry(settings), path=path)
    assert any("policy.cedar" in line and "cannot read" in line for line in found), found
