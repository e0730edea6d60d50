"""How Claude Code's tool calls are put to signoff: places decided on resolved paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from signoff.cli.claude_tools import CLAUDE_TOOLS, ask_for, tool_table


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a `dotfiles` symlink to a home directory outside it."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "dotfiles").symlink_to(home)
    return root


def test_a_write_through_a_symlink_out_of_the_project_asks(project: Path) -> None:
    """Write to dotfiles/.bashrc (dotfiles -> ~) is DESTRUCTIVE and the card names the real file."""
    asked = ask_for("Write", {"file_path": "dotfiles/.bashrc", "content": "evil"}, project)
    real = str(project.parent / "home" / ".bashrc")
    assert asked.risk == "DESTRUCTIVE"
    assert real in asked.targets and real in asked.card and "outside the project" in asked.card
    absolute = ask_for("Edit", {"file_path": str(project / "dotfiles" / ".bashrc")}, project)
    assert absolute.risk == "DESTRUCTIVE"


def test_a_new_file_under_a_symlinked_directory_is_placed_by_its_parent(project: Path) -> None:
    """A file that does not exist yet, below a symlink out of the project, is outside."""
    asked = ask_for("Write", {"file_path": "dotfiles/.config/new/rc"}, project)
    assert asked.risk == "DESTRUCTIVE"
    dangling = project / "later"
    dangling.symlink_to(project.parent / "home" / "not-yet")
    assert ask_for("Write", {"file_path": "later"}, project).risk == "DESTRUCTIVE"


def test_a_plain_write_inside_the_project_is_draft(project: Path) -> None:
    """src/a.py (new) and ../project/src/b.py stay DRAFT with no extra card words."""
    asked = ask_for("Write", {"file_path": "src/a.py", "content": "x"}, project)
    assert (asked.risk, asked.targets, asked.card) == ("DRAFT", ("src/a.py",), "")
    assert asked.fingerprint_args == {"file_path": "src/a.py"}
    assert ask_for("Edit", {"file_path": "../project/src/b.py"}, project).risk == "DRAFT"


@pytest.mark.parametrize("path", [
    ".git/hooks/pre-commit", ".GIT/config", ".claude/settings.json", ".github/workflows/ci.yml",
    ".gitlab-ci.yml", ".ci/run", ".husky/pre-push", ".pre-commit-config.yaml",
    "sub/.git/hooks/post-checkout", ".mcp.json", ".cursor/mcp.json"])
def test_writes_to_git_ci_hooks_and_agent_settings_ask(project: Path, path: str) -> None:
    """Files that run code later or configure the agent are treated as outside the project."""
    asked = ask_for("Write", {"file_path": path, "content": "x"}, project)
    assert asked.risk == "DESTRUCTIVE" and "hook" in asked.card


def test_a_hard_linked_file_in_the_project_is_outside(project: Path) -> None:
    """Writing a hard link changes the file elsewhere: it asks."""
    os.link(project.parent / "home" / ".bashrc", project / "src" / "rc")
    assert ask_for("Write", {"file_path": "src/rc"}, project).risk == "DESTRUCTIVE"


def test_reads_outside_the_project_ask_and_inside_ones_do_not(project: Path) -> None:
    """Read/Grep/Glob/LS outside the project (or through a symlink) are SEND; inside READ."""
    assert ask_for("Read", {"file_path": "src/a.py"}, project).risk == "READ"
    assert ask_for("Read", {"file_path": "/etc/passwd"}, project).risk == "SEND"
    assert ask_for("Read", {"file_path": "dotfiles/.bashrc"}, project).risk == "SEND"
    assert ask_for("Grep", {"pattern": "key", "path": str(project.parent)}, project
                   ).risk == "SEND"
    assert ask_for("Grep", {"pattern": "key"}, project).risk == "READ"
    assert ask_for("Glob", {"pattern": "../**/*.pem"}, project).risk == "SEND"
    assert ask_for("Glob", {"pattern": "**/*.py"}, project).risk == "READ"
    assert ask_for("LS", {"path": "/"}, project).risk == "SEND"


def test_webfetch_and_unknown_tools_ask(project: Path) -> None:
    """WebFetch is SEND (the URL can carry data out); a tool not in the table is DESTRUCTIVE."""
    fetch = ask_for("WebFetch", {"url": "https://x.test/?q=1", "prompt": "p"}, project)
    assert (fetch.risk, fetch.targets, fetch.content) == ("SEND", ("https://x.test/?q=1",),
                                                          ("prompt",))
    odd = ask_for("Teleport", {"to": "mars"}, project)
    assert (odd.tool, odd.risk, odd.fingerprint_args) == ("claude.Teleport", "DESTRUCTIVE",
                                                          {"to": "mars"})


def test_bash_flags_are_in_the_fingerprint_and_on_the_card(project: Path) -> None:
    """dangerouslyDisableSandbox / run_in_background make a separate, always-asked action."""
    plain = ask_for("Bash", {"command": "ls", "description": "list"}, project)
    assert plain.request() == {"tool": "run_command",
                               "args": {"command": "ls", "cwd": str(project)}}
    bare = ask_for("Bash", {"command": "ls", "dangerouslyDisableSandbox": True}, project)
    assert (bare.tool, bare.risk) == ("claude.Bash", "DESTRUCTIVE")
    assert bare.fingerprint_args["dangerouslyDisableSandbox"] is True
    assert "sandbox is DISABLED" in bare.card and bare.request()["why"] == bare.card
    background = ask_for("Bash", {"command": "ls", "run_in_background": True}, project)
    assert "background" in background.card
    assert background.fingerprint_args != bare.fingerprint_args


def test_claude_code_2_1_tools_are_in_the_table_and_the_docs_table() -> None:
    """Agent, MultiEdit, BashOutput, KillShell, ExitPlanMode… are labelled; the docs table
    is generated from the same table."""
    for name in ("Agent", "Task", "MultiEdit", "NotebookEdit", "LS", "BashOutput",
                 "KillShell", "KillBash", "ExitPlanMode", "SlashCommand", "TodoWrite"):
        assert name in CLAUDE_TOOLS
    table = tool_table()
    for name, label in CLAUDE_TOOLS.items():
        row = next(r for r in table.splitlines() if r.startswith(f"| `{name}` |"))
        assert f"`claude.{name}`" in row and f"`{label.capability}`" in row
        assert all(f"`{k}`" in row for k in (*label.targets, *label.content))
