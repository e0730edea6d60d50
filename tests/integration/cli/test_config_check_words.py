"""What `signoff config check` says: an MCP server by its name, a database path that
cannot be written and why, and the tool probably meant by a misspelt name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from signoff.cli.main import app


def check(tmp_path: Path, text: str, *, state: Path | None = None) -> tuple[int, str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    state = state or tmp_path / "state"
    path = tmp_path / "signoff.toml"
    path.write_text(f'[daemon]\nwork_dir = "{work}"\nstate_dir = "{state}"\n' + text)
    result = CliRunner().invoke(app, ["config", "check", str(path)])
    return result.exit_code, result.output


SERVERS = """
[[mcp.servers]]
name = "git"
command = ["git-mcp-server-that-is-not-installed"]

[[mcp.servers]]
name = "tickets"
url = "ftp://tickets.example/mcp"
"""


def test_an_mcp_server_is_named_by_its_name(tmp_path: Path) -> None:
    """A schema error about the second server says 'tickets', not mcp.servers[1]."""
    code, output = check(tmp_path, SERVERS)
    assert code == 2
    assert "mcp.servers['tickets'].url: expected an http:// or https:// URL" in output
    assert "mcp.servers[1]" not in output


def test_a_server_that_cannot_start_is_named_by_its_name(tmp_path: Path) -> None:
    """The preflight's command check names the server 'git'."""
    code, output = check(tmp_path, SERVERS.replace("ftp://", "http://"))
    assert code == 2
    assert ("mcp.servers['git'].command: cannot start 'git-mcp-server-that-is-not-installed'"
            ": not found on PATH") in output
    assert "mcp.servers[0]" not in output


def test_a_repeated_server_name_keeps_its_index(tmp_path: Path) -> None:
    """Two servers called 'git' cannot be told apart by name: the index is kept."""
    code, output = check(tmp_path, SERVERS.replace('"tickets"', '"git"').replace("ftp:", "http:"))
    assert code == 2
    assert "mcp.servers[1].name: duplicate server name 'git'" in output


def test_a_state_dir_under_a_file_is_named_with_why(tmp_path: Path) -> None:
    """A state dir that would have to be made inside a file: refused, naming the file."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    code, output = check(tmp_path, "", state=blocker / "state")
    assert code == 2
    assert f"daemon.state_dir: cannot write {blocker / 'state'}: {blocker} is a file, " \
           "not a directory" in output


def test_a_database_under_a_file_is_named_with_why(tmp_path: Path) -> None:
    """A SQLite database placed under a file: daemon.database is named, and why."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    code, output = check(tmp_path, f'database = "sqlite:///{blocker}/signoff.db"\n')
    assert code == 2
    assert f"daemon.database: cannot write {blocker}/signoff.db: {blocker} is a file" in output


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission bits")
def test_a_state_dir_without_permission_is_named_with_why(tmp_path: Path) -> None:
    """A parent directory the daemon's user may not write (0500): refused, saying so."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        code, output = check(tmp_path, "", state=locked / "state")
    finally:
        locked.chmod(0o700)
    assert code == 2
    assert f"cannot write {locked / 'state'}: no permission to write in {locked} (mode 500" \
           in output


@pytest.mark.skipif(not os.environ.get("SIGNOFF_TEST_READ_ONLY_DIR"),
                    reason="needs a directory on a read-only file system "
                           "(SIGNOFF_TEST_READ_ONLY_DIR); making one needs mount rights")
def test_a_state_dir_on_a_read_only_file_system_is_named(tmp_path: Path) -> None:
    """A state dir on a read-only mount: refused, saying the file system is read-only."""
    ro = Path(os.environ["SIGNOFF_TEST_READ_ONLY_DIR"])
    code, output = check(tmp_path, "", state=ro / "signoff-state")
    assert code == 2
    assert "is on a read-only file system" in output


def test_a_writable_state_dir_passes(tmp_path: Path) -> None:
    """The same config with a fresh state dir in a writable place is OK."""
    code, output = check(tmp_path, "")
    assert code == 0, output


def test_a_misspelt_step_tool_gets_a_suggestion(tmp_path: Path) -> None:
    """A recipe step's 'send_emial' is refused with "did you mean 'send_email'?"."""
    code, output = check(tmp_path, '[[recipes]]\nname = "mail"\nmatch = "mail"\n'
                                   'steps = [{ tool = "send_emial", args = {} }]\n')
    assert code == 2
    assert "recipes[0].steps[0]: unknown tool 'send_emial' — did you mean 'send_email'?" \
           in output


def test_a_misspelt_prohibited_tool_is_warned_about(tmp_path: Path) -> None:
    """`policy.prohibit = ["send_emial"]` prohibits nothing here: a warning says what was
    probably meant (the file is still valid)."""
    code, output = check(tmp_path, '[policy]\nprohibit = ["send_emial", "SEND", "fs.delete"]\n')
    assert code == 0, output
    assert "policy.prohibit[0]: unknown tool 'send_emial' — did you mean 'send_email'?" \
           in output
    assert "policy.prohibit[1]" not in output and "policy.prohibit[2]" not in output
