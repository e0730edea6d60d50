"""What `config check` warns about but does not refuse: `[policy.quorum]` and
`[policy.budgets]` keys that match no tool here (a typo would silently leave deletions at
one approver; an outside agent's requests may name a capability of their own), and a
quorum larger than everyone who could ever decide."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from signoff.cli.main import app
from signoff.config import preflight
from signoff.config.settings import load_settings
from signoff.runtime.tools.registry import builtin_registry

PEOPLE = '[approvals]\napprovers = ["slack:U1", "slack:U2", "slack:U3"]\n'


def notices(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "signoff.toml"
    path.write_text(text)
    return preflight.notices(load_settings(path), builtin_registry(entry_points_group=None),
                             path=path)


def test_a_misspelled_capability_is_named_with_the_known_ones(tmp_path: Path) -> None:
    found = notices(tmp_path, PEOPLE + '[policy.quorum]\n"fs.delet" = 2\n[policy.budgets]\n'
                                       '"emial.send" = 3\n')
    assert len(found) == 2
    where = tmp_path / "signoff.toml"
    assert found[0].startswith(f"{where}: policy.quorum.fs.delet: no tool here has "
                               "capability 'fs.delet'")
    assert "fs.delete" in found[0]  # what was probably meant is in the list
    assert found[1].startswith(f"{where}: policy.budgets.emial.send:")


def test_capabilities_risk_classes_and_mcp_servers_are_known(tmp_path: Path) -> None:
    text = (PEOPLE + '[[mcp.servers]]\nname = "git"\nurl = "http://127.0.0.1:9/mcp"\n'
            '[mcp.servers.tools.git_log]\ncapability = "git.read"\n'
            '[policy.quorum]\n"fs.delete" = 2\nsend = 2\n"mcp.git" = 2\n"git.read" = 2\n'
            '[policy.budgets]\n"email.send" = 5\n')
    assert notices(tmp_path, text) == []


def test_a_quorum_larger_than_everyone_who_can_decide_is_named(tmp_path: Path) -> None:
    """Two chat approvers and the admin key are three people: a quorum of 4 can only
    expire; 3 can be reached."""
    head = ('[api]\nkey = "k-123456789"\n[approvals]\n'
            'approvers = ["slack:U0ALICE", "telegram:42"]\n')
    [found] = notices(tmp_path, head + '[policy.quorum]\nDESTRUCTIVE = 4\n')
    assert "policy.quorum.DESTRUCTIVE: needs 4 distinct approvers, but only 3" in found
    assert "slack:U0ALICE, telegram:42, web:admin" in found
    assert notices(tmp_path, head + '[policy.quorum]\nDESTRUCTIVE = 3\n') == []


def test_on_call_members_and_named_keys_count_as_deciders(tmp_path: Path) -> None:
    text = ('[[api.keys]]\nname = "alice"\nkey = "k-alice-123456"\n'
            '[[api.keys]]\nname = "bob"\nkey = "k-bob-1234567"\n'
            '[[oncall.rotations]]\nname = "ops"\nmembers = ["slack:U1", "slack:U2"]\n'
            '[policy.quorum]\n"fs.delete" = 4\n')
    assert notices(tmp_path, text) == []


def test_config_check_prints_the_warning_and_accepts_the_file(tmp_path: Path) -> None:
    path = tmp_path / "signoff.toml"
    path.write_text(PEOPLE + '[policy.quorum]\n"fs.delet" = 2\n')
    result = CliRunner().invoke(app, ["config", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert f"warning: {path}: policy.quorum.fs.delet: no tool here" in result.stderr
    assert "warning" not in result.stdout


def test_two_accounts_of_one_person_count_as_one_decider(tmp_path: Path) -> None:
    """Alice's Slack and Telegram accounts are one person: with the admin key that is two
    people, so a quorum of 3 can only expire."""
    text = ('[api]\nkey = "k-123456789"\n[approvals]\n'
            'approvers = ["slack:U0ALICE", "telegram:42"]\n'
            '[[people]]\nname = "alice"\naccounts = ["slack:U0ALICE", "telegram:42"]\n'
            '[policy.quorum]\nDESTRUCTIVE = 3\n')
    [found] = notices(tmp_path, text)
    assert "needs 3 distinct approvers, but only 2" in found
