"""Tools of the real `mcp-server-git`, started through the `mcp` SDK on a real repository:
reads run unattended, writes wait for a person, grants stay on their repository."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from signoff.errors import BadArguments
from signoff.runtime.models import RiskClass, Scope, TaskState
from signoff.runtime.tools.mcp.procs import is_alive
from signoff.testing import RecordingSurface
from signoff.wiring import Node
from tests.factories import answer, start
from tests.mcp_support import (
    GIT_RULES,
    add,
    commit,
    commit_messages,
    eventually,
    git_server,
    make_repo,
    mcp_config,
    status,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The repository the git server is confined to; other repositories go inside it."""
    return make_repo(tmp_path / "repos")


async def git_node(node_factory, root: Path, **server) -> Node:
    node = await node_factory(mcp_config(git_server(root, **server)))
    await node.mcp.start()
    assert node.mcp.status() == {"git": "up"}, node.mcp.status()
    return node


def cards(node: Node) -> list:
    platform = node.surfaces["recording"]
    assert isinstance(platform, RecordingSurface)
    return [m.card for m in platform.messages.values()]


async def test_git_status_is_read_and_runs_without_asking(node_factory, root: Path) -> None:
    """git.git_status, configured READ, runs unattended and returns the server's text."""
    repo = make_repo(root / "a")
    node = await git_node(node_factory, root)
    task = await start(node, [status(repo)])
    assert task.state is TaskState.COMPLETED, task.result
    assert "new.txt" in task.actions[0].output["text"]
    assert task.actions[0].capability == "git.read"
    assert cards(node) == []


async def test_add_and_commit_wait_for_approval_and_approving_commits(node_factory,
                                                                      root: Path) -> None:
    """git_add and git_commit are gated; approving both puts the commit in the repository."""
    repo = make_repo(root / "a")
    node = await git_node(node_factory, root)
    task = await start(node, [add(repo, "new.txt"), commit(repo, "add new.txt")])
    assert task.state is TaskState.WAITING_APPROVAL
    assert task.pending_action is not None
    assert task.pending_action.risk is RiskClass.DESTRUCTIVE
    assert task.pending_action.targets == (str(repo),)
    _, task = await answer(node, task.id, Scope.ONCE)
    assert task.state is TaskState.WAITING_APPROVAL and task.pending_action is not None
    assert task.pending_action.tool == "git.git_commit"
    assert commit_messages(repo) == ["initial"]  # nothing committed before the approval
    _, task = await answer(node, task.id, Scope.ONCE)
    assert task.state is TaskState.COMPLETED, task.result
    assert commit_messages(repo) == ["add new.txt", "initial"]


async def test_denying_the_commit_commits_nothing(node_factory, root: Path) -> None:
    """A denied git_commit fails the task with "user denied" and the repository is unchanged."""
    repo = make_repo(root / "a")
    node = await git_node(node_factory, root)
    task = await start(node, [commit(repo)])
    _, task = await answer(node, task.id, Scope.DENY)
    assert task.state is TaskState.FAILED
    assert task.result is not None and task.result["reason"] == "user denied"
    assert commit_messages(repo) == ["initial"]


async def test_a_session_grant_on_one_repo_does_not_cover_another(node_factory,
                                                                  root: Path) -> None:
    """Session for git_commit on repo A covers A's next commit (another message), not B's."""
    repo_a, repo_b = make_repo(root / "a"), make_repo(root / "b")
    (repo_a / "second.txt").write_text("2\n")
    rules = {**GIT_RULES, "git_add": {"risk": "DRAFT", "targets": ["repo_path"]}}
    node = await git_node(node_factory, root, rules=rules)
    task = await start(node, [add(repo_a, "new.txt"), commit(repo_a, "one"),
                              add(repo_a, "second.txt"), commit(repo_a, "two"),
                              add(repo_b, "new.txt"), commit(repo_b, "three")])
    _, task = await answer(node, task.id, Scope.SESSION)
    assert commit_messages(repo_a) == ["two", "one", "initial"]
    assert task.state is TaskState.WAITING_APPROVAL and task.pending_action is not None
    assert task.pending_action.targets == (str(repo_b),)
    assert commit_messages(repo_b) == ["initial"]
    assert len(cards(node)) == 2


async def test_the_card_shows_the_arguments_and_the_untrusted_hints(node_factory,
                                                                    root: Path) -> None:
    """The card's title names the call and the server's annotations, marked unverified;
    the commit message (content) is shown in its details, then the tool's description
    as the server lists it, said to be the server's words."""
    repo = make_repo(root / "a")
    node = await git_node(node_factory, root)
    await start(node, [commit(repo, "fix the bug")])
    (card,) = cards(node)
    assert card.tool == "git.git_commit" and card.targets == (str(repo),)
    assert card.title.startswith(f"Run git.git_commit on {repo} — server hints: not read-only")
    assert "the server's claim, not verified" in card.title
    (content, (label, said)) = card.details
    assert content == ("message", "fix the bug")
    assert label == "The server describes this tool as"
    assert said.startswith("Records changes to the repository")


async def test_arguments_are_checked_against_the_input_schema_before_any_card(
        node_factory, root: Path) -> None:
    """A call that breaks the tool's inputSchema is refused at submission; no card is posted."""
    repo = make_repo(root / "a")
    node = await git_node(node_factory, root)
    with pytest.raises(BadArguments, match="'files'"):
        await start(node, [add(repo)])  # files: minItems 1
    with pytest.raises(BadArguments, match="repo_path"):
        node.registry.prepare(commit(repo).model_copy(update={"args": {"message": "m"}}))
    assert cards(node) == []


async def test_a_killed_server_is_restarted_and_its_tools_work_again(node_factory,
                                                                     root: Path) -> None:
    """SIGKILL to the server process: the connection notices, restarts it, and calls work."""
    repo = make_repo(root / "a")
    node = await git_node(node_factory, root)
    conn = node.mcp.connections["git"]
    first = conn.pid
    assert first is not None and is_alive(first)
    os.kill(first, signal.SIGKILL)
    await eventually(lambda: conn.starts == 2 and conn.state == "up", "the restart")
    assert conn.pid is not None and conn.pid != first
    task = await start(node, [status(repo)])
    assert task.state is TaskState.COMPLETED, task.result


async def test_while_the_server_is_down_its_tools_fail_with_a_clear_error(
        node_factory, tmp_path: Path) -> None:
    """A server that cannot run is "down: …" (with its own last words) and its tool fails."""
    missing = tmp_path / "no-such-repo"
    node = await node_factory(mcp_config(git_server(missing)))
    await node.mcp.start()
    state = node.mcp.status()["git"]
    assert state.startswith("down: ") and "does not exist" in state, state
    task = await start(node, [status(missing)])
    assert task.state is TaskState.FAILED
    reason = task.result["reason"] if task.result else ""
    assert "MCP server 'git' is down" in reason, reason


async def test_stopping_stops_the_server_process(node_factory, root: Path) -> None:
    """After stop() the server process no longer runs (it is not in our process group)."""
    make_repo(root / "a")
    node = await git_node(node_factory, root)
    pid = node.mcp.connections["git"].pid
    assert pid is not None
    assert os.getpgid(pid) != os.getpgid(0)  # why the daemon must stop it itself
    await node.mcp.stop()
    await eventually(lambda: not is_alive(pid), "the server to exit")
    assert node.mcp.status() == {"git": "stopped"}
