"""How the Hermes plugin puts Hermes' tool calls to signoff (pure mapping, no Hermes)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from signoff_client import hermes
from signoff_client.hermes import TOOLS, request_for

PAGE = Path(__file__).resolve().parents[3] / "docs" / "outside" / "hermes.md"


def test_terminal_is_run_command_with_the_exact_command_and_cwd() -> None:
    """terminal → run_command {command, cwd}: workdir when given, else the process's cwd."""
    given = request_for("terminal", {"command": "rm -rf build", "workdir": "/srv/app",
                                     "background": True, "timeout": 30})
    assert given == {"tool": "run_command", "args": {"command": "rm -rf build",
                                                     "cwd": "/srv/app"}}
    assert request_for("terminal", {"command": "ls"})["args"]["cwd"] == os.getcwd()


def test_known_tools_carry_their_labels_and_unknown_ones_are_destructive() -> None:
    """A mapped tool sends risk, capability, targets and content; others DESTRUCTIVE."""
    web = request_for("web_extract", {"urls": ["https://a", "https://b"], "char_limit": 5})
    assert web["risk"] == "SEND" and web["targets"] == ["https://a", "https://b"]
    mail = request_for("send_message", {"action": "send", "target": "telegram:-1",
                                        "message": "hi"})
    assert (mail["tool"], mail["risk"], mail["capability"]) == ("hermes.send_message", "SEND",
                                                                "chat.post")
    assert mail["targets"] == ["telegram:-1"] and mail["content"] == ["message"]
    odd = request_for("yb_send_dm", {"to": "x"})
    assert odd == {"tool": "hermes.yb_send_dm", "args": {"to": "x"}, "risk": "DESTRUCTIVE",
                   "capability": "hermes.yb_send_dm"}


def test_the_hook_blocks_with_a_message_when_the_daemon_is_unreachable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listening: the hook answers a block with a non-empty message (fail closed)."""
    monkeypatch.setenv("SIGNOFF_URL", "http://127.0.0.1:9")
    hermes.reset_client()
    try:
        answer = hermes.pre_tool_call(tool_name="read_file", args={"path": "x"},
                                      session_id="s", tool_call_id="c", turn_id="t")
    finally:
        hermes.reset_client()
    assert answer is not None and answer["action"] == "block"
    assert answer["message"].startswith("signoff: not approved:")
    assert "unreachable" in answer["message"]


def test_the_docs_table_matches_the_mapping() -> None:
    """The Hermes page's table of Hermes tools is the plugin's table, row for row."""
    text = PAGE.read_text()
    table = text.split("<!-- hermes-tools -->")[1].split("<!-- /hermes-tools -->")[0]
    rows = {}
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    assert set(rows) == {*TOOLS, "terminal", "any other tool"}
    for name, rule in TOOLS.items():
        _, sent, risk, capability, targets, content = rows[name]
        assert sent == f"`hermes.{name}`" and risk == rule.risk
        assert capability == f"`{rule.capability}`"
        assert re.findall(r"`([^`]+)`", targets) == list(rule.targets)
        assert re.findall(r"`([^`]+)`", content) == list(rule.content)
    assert rows["terminal"][1] == "`run_command`" and "DESTRUCTIVE" in rows["terminal"][2]


def test_write_file_through_a_symlink_out_of_the_working_dir_asks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_file to dotfiles/.bashrc (dotfiles -> ~) is DESTRUCTIVE, naming the real file."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "dotfiles").symlink_to(home)
    monkeypatch.chdir(work)
    asked = request_for("write_file", {"path": "dotfiles/.bashrc", "content": "x"})
    assert asked["risk"] == "DESTRUCTIVE"
    assert str(home / ".bashrc") in asked["targets"] and str(home / ".bashrc") in asked["why"]
    inside = request_for("write_file", {"path": "notes.txt", "content": "x"})
    assert inside["risk"] == "DRAFT" and "why" not in inside
    hook = request_for("patch", {"path": ".git/hooks/pre-commit", "old_string": "a",
                                 "new_string": "b"})
    assert hook["risk"] == "DESTRUCTIVE"


def test_a_v4a_patch_that_moves_a_file_out_of_the_working_dir_asks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """patch in "patch" mode is placed by every file its headers name."""
    monkeypatch.chdir(tmp_path)
    text = "*** Begin Patch\n*** Update File: a.txt\n*** Move to: ../../etc/cron.d/x\n" \
           "*** End Patch"
    asked = request_for("patch", {"mode": "patch", "patch": text})
    assert asked["risk"] == "DESTRUCTIVE" and "../../etc/cron.d/x" in asked["targets"]
    fine = request_for("patch", {"mode": "patch", "patch": text.replace("../../etc/cron.d/",
                                                                        "b/")})
    assert fine["risk"] == "DRAFT"


def test_reading_outside_the_working_dir_asks_and_says_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_file of a daemon's config beside the project, or through a symlink to ~,
    is SEND naming the real file; inside the working directory it stays READ."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    (work / "dotfiles").symlink_to(home)
    monkeypatch.chdir(work)
    inside = request_for("read_file", {"path": "notes.txt"})
    assert inside["risk"] == "READ" and "why" not in inside
    config = request_for("read_file", {"path": "../signoff.toml"})
    assert config["risk"] == "SEND" and "outside the project" in config["why"]
    key = request_for("read_file", {"path": "dotfiles/.ssh/id_ed25519"})
    assert key["risk"] == "SEND"
    assert str(home / ".ssh" / "id_ed25519") in key["targets"]
    assert str(home / ".ssh" / "id_ed25519") in key["why"]
    assert request_for("search_files", {"pattern": "TODO"})["risk"] == "READ"
    assert request_for("search_files", {"pattern": "key", "path": "/etc"})["risk"] == "SEND"
    assert request_for("read_file", {"path": ".git/config"})["risk"] == "SEND"


def test_fetching_a_url_the_model_chose_asks() -> None:
    """web_extract and browser_navigate are SEND: the URL can carry data out."""
    for tool, args in (("web_extract", {"urls": ["https://x.example/?d=secret"]}),
                       ("browser_navigate", {"url": "https://x.example/?d=secret"})):
        asked = request_for(tool, args)
        assert asked["risk"] == "SEND" and "carry data out" in asked["why"]
        assert "https://x.example/?d=secret" in asked["targets"]
