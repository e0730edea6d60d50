"""The daemon's own files live in a private state dir that the agent's tools cannot reach.

Real nodes on real SQLite files: the file tools run through the engine or the registry
with the ToolContext the wiring builds, and the disk is looked at afterwards.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import stat
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from signoff.config.settings import load_settings
from signoff.errors import PathEscape, ToolError
from signoff.runtime import audit
from signoff.runtime.models import Action
from signoff.runtime.state import NODE_ID_FILE, SECRET_FILE, server_secret
from signoff.wiring import Node, build_node, prepare_state
from tests.conftest import NodeFactory, SettingsFactory


async def tool(node: Node, name: str, **args: Any) -> dict[str, Any]:
    """Run one built-in tool as the engine would (check, then run) with the node's context."""
    action = node.registry.prepare(Action(tool=name, args=args))
    await node.registry.check(action, node.engine.tool_context)
    return await node.registry.execute(action, node.engine.tool_context)


async def refused(node: Node, name: str, **args: Any) -> str:
    """The refusal of one tool call (it must be refused as a path the tools may not use)."""
    with pytest.raises(PathEscape) as caught:
        await tool(node, name, **args)
    return str(caught.value)


def state_of(tmp_path: Path) -> Path:
    return tmp_path / "signoff-state"


async def test_the_default_layout_keeps_state_out_of_the_work_dir(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """With no state_dir or database set, the database, its siblings and the node id are in
    signoff-state beside the work dir, and the work dir holds none of them."""
    node = await node_factory()
    await tool(node, "write_file", path="a.txt", content="x")  # a write: -wal exists now
    state = state_of(tmp_path)
    assert {"signoff.db", "signoff.db-wal", NODE_ID_FILE} <= {p.name for p in state.iterdir()}
    assert sorted(p.name for p in node.work_dir.iterdir()) == ["a.txt"]


async def test_a_task_cannot_wipe_the_database_or_the_node_id(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """The 0.2 attack (DRAFT write_file over signoff.db and node-id, READ read_file of the
    -wal, all unattended) leaves the audit chain verifiable and the node id as it was."""
    node = await node_factory()
    before = (state_of(tmp_path) / NODE_ID_FILE).read_text()
    steps = [Action(tool="read_file", args={"path": "signoff.db-wal"}),
             Action(tool="write_file", args={"path": "signoff.db", "content": ""}),
             Action(tool="write_file", args={"path": NODE_ID_FILE, "content": "other\n"})]
    for step in steps:
        task = await node.engine.submit("wipe", steps=[step], claim=True)
        assert task is not None
        await node.engine.advance(task)
    assert (await audit.verify(node.store)).ok
    assert (state_of(tmp_path) / NODE_ID_FILE).read_text() == before
    for path in ("../signoff-state/signoff.db", str(state_of(tmp_path) / "signoff.db-wal")):
        await refused(node, "read_file", path=path)


@pytest.mark.parametrize("name", ["signoff.db", "signoff.db-wal", "signoff.db-shm",
                                  "signoff.db-grants", NODE_ID_FILE, SECRET_FILE])
async def test_a_hard_link_to_any_state_file_is_refused(
        node_factory: NodeFactory, tmp_path: Path, name: str) -> None:
    """A hard link placed in the work dir to the database, its -wal/-shm, the grant mark,
    the node id or the server secret is refused for reading, writing and deleting."""
    node = await node_factory()
    await tool(node, "write_file", path="a.txt", content="x")
    server_secret(prepare_state(node.settings))
    target = state_of(tmp_path) / name
    os.link(target, node.work_dir / "copy")
    assert "daemon's own file" in await refused(node, "read_file", path="copy")
    assert "hard links" in await refused(node, "write_file", path="copy", content="")
    assert "hard links" in await refused(node, "delete_file", path="copy")
    assert (node.work_dir / "copy").exists() and target.stat().st_nlink == 2


async def test_a_configured_database_is_refused_wherever_it_is(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """A database configured inside the work dir is refused by name and identity (the file,
    its -wal and -shm, even one not created yet); one configured outside both dirs is
    refused through a hard link in the work dir."""
    work = tmp_path / "work"
    inside = await node_factory({"daemon": {"database": f"sqlite:///{work / 'x.db'}"}})
    await tool(inside, "write_file", path="a.txt", content="x")
    for name in ("x.db", "x.db-wal", "x.db-shm", "x.db-journal", "./sub/../x.db"):
        await refused(inside, "read_file", path=name)
    assert "database" in await refused(inside, "write_file", path="x.db-journal", content="")
    await refused(inside, "delete_file", path="x.db")
    await refused(inside, "list_dir", path=str(tmp_path / "signoff-state"))
    elsewhere = tmp_path / "elsewhere" / "y.db"
    outside = await node_factory({"daemon": {"database": f"sqlite:///{elsewhere}",
                                             "work_dir": str(tmp_path / "work2")}})
    os.link(elsewhere, outside.work_dir / "y.db")
    assert "daemon's own file" in await refused(outside, "read_file", path="y.db")


async def test_writes_and_deletes_through_links_are_refused(
        node_factory: NodeFactory) -> None:
    """An ordinary file with a second hard link can be read but not written or deleted; a
    write through a symlink is refused (a delete removes the link itself); a symlink to
    the state dir is refused as leaving the work dir."""
    node = await node_factory()
    work = node.work_dir
    (work / "a.txt").write_text("one")
    os.link(work / "a.txt", work / "b.txt")
    assert (await tool(node, "read_file", path="b.txt"))["content"] == "one"
    await refused(node, "write_file", path="b.txt", content="two")
    await refused(node, "delete_file", path="b.txt")
    (work / "c.txt").write_text("three")
    (work / "link.txt").symlink_to(work / "c.txt")
    assert "symlink" in await refused(node, "write_file", path="link.txt", content="x")
    assert (work / "a.txt").read_text() == "one" and (work / "c.txt").read_text() == "three"
    (work / "state").symlink_to(work.parent / "signoff-state")
    await refused(node, "read_file", path="state/signoff.db")
    await tool(node, "delete_file", path="link.txt")
    assert not (work / "link.txt").exists() and (work / "c.txt").exists()


async def test_state_is_private_to_the_daemon_user(node_factory: NodeFactory,
                                                  tmp_path: Path) -> None:
    """The state dir is created 0700 and the database, its -wal, the node id and the server
    secret 0600: another local user reads none of them; an existing state dir others could
    enter is closed to 0700."""
    state_of(tmp_path).mkdir(mode=0o755)
    state_of(tmp_path).chmod(0o755)
    node = await node_factory()
    await tool(node, "write_file", path="a.txt", content="x")
    state = prepare_state(node.settings)
    assert len(server_secret(state)) == 32
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("signoff.db", "signoff.db-wal", NODE_ID_FILE, SECRET_FILE):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name


async def test_a_0_2_layout_is_moved_into_the_state_dir(
        node_factory: NodeFactory, settings_factory: SettingsFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A work dir holding 0.2's database, grant mark and node id: the first start moves
    them into the state dir (saying so in the log), keeps their content, and the tools
    can no longer reach them."""
    work = tmp_path / "work"
    old = build_node(settings_factory(daemon={"database": f"sqlite:///{work / 'signoff.db'}"}),
                     surfaces={})
    await old.store.open()
    task = await old.engine.submit("from 0.2")
    await old.store.close()
    shutil.rmtree(state_of(tmp_path))  # what 0.3 made of it: 0.2 had no state dir
    assert task is not None and (work / "signoff.db").exists()
    (work / NODE_ID_FILE).write_text("abc123\n")
    (work / "notes.txt").write_text("mine")
    caplog.set_level(logging.WARNING, logger="signoff.wiring")
    node = await node_factory()
    state = state_of(tmp_path)
    assert not (work / "signoff.db").exists() and not (work / NODE_ID_FILE).exists()
    assert (work / "notes.txt").read_text() == "mine"
    assert node.engine.config.node_id.endswith("-abc123")
    assert (await node.store.get_task(task.id)) is not None
    assert stat.S_IMODE((state / "signoff.db").stat().st_mode) == 0o600
    assert any("state_moved" in r.getMessage() and str(state) in r.getMessage()
               for r in caplog.records)


async def test_a_half_moved_layout_moves_what_is_missing_and_says_what_it_left(
        node_factory: NodeFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A state dir that already has a node id still takes the 0.2 database from the work
    dir; a work dir copy of something the state dir has is left and named in the log."""
    work, state = tmp_path / "work", state_of(tmp_path)
    work.mkdir()
    state.mkdir()
    (state / NODE_ID_FILE).write_text("new111\n")
    (work / NODE_ID_FILE).write_text("old222\n")
    (work / "signoff.db").write_bytes(b"")
    caplog.set_level(logging.WARNING, logger="signoff.wiring")
    node = await node_factory()
    assert node.engine.config.node_id.endswith("-new111")
    assert not (work / "signoff.db").exists() and (state / "signoff.db").exists()
    [left] = [r.getMessage() for r in caplog.records if "state_not_moved" in r.getMessage()]
    assert f"files={NODE_ID_FILE}" in left


async def test_a_work_dir_inside_the_state_dir_works(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """state_dir = /x and work_dir = /x/work is allowed: the work dir is listed and used as a
    cwd, while the state files beside it stay out of reach."""
    state = tmp_path / "var"
    node = await node_factory({"daemon": {"state_dir": str(state),
                                          "work_dir": str(state / "work")}})
    await tool(node, "write_file", path="a.txt", content="x")
    assert [e["name"] for e in (await tool(node, "list_dir", path="."))["entries"]] == ["a.txt"]
    assert (await tool(node, "run_command", command="ls"))["stdout"] == "a.txt\n"
    await refused(node, "read_file", path="../signoff.db")
    await refused(node, "list_dir", path="..")


async def test_run_command_sees_none_of_the_daemons_secrets(
        node_factory: NodeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret in the daemon's environment is not visible to a run_command child; PATH is,
    and so is a variable listed in tools.run_command.env."""
    monkeypatch.setenv("SIGNOFF_TEST_SECRET", "hunter2")
    monkeypatch.setenv("SIGNOFF_TEST_SHARED", "ok")
    code = "import os; print(os.environ.get('SIGNOFF_TEST_SECRET'), 'PATH' in os.environ)"
    command = f"{sys.executable} -c \"{code}\""
    node = await node_factory()
    out = await tool(node, "run_command", command=command)
    assert out["stdout"].split() == ["None", "True"]
    shared = await node_factory({"tools": {"run_command": {"env": ["SIGNOFF_TEST_SHARED"]}}})
    echo = "import os; print(sorted(os.environ))"
    listed = await tool(shared, "run_command", command=f"{sys.executable} -c \"{echo}\"")
    assert "SIGNOFF_TEST_SHARED" in listed["stdout"]
    assert "SIGNOFF_TEST_SECRET" not in listed["stdout"]


async def test_a_cwd_in_the_state_dir_is_refused(node_factory: NodeFactory,
                                                 tmp_path: Path) -> None:
    """run_command cannot be pointed at the state dir, even through a symlink."""
    node = await node_factory()
    (node.work_dir / "st").symlink_to(state_of(tmp_path))
    with pytest.raises(ToolError):
        await tool(node, "run_command", command="ls", cwd="st")


async def test_the_config_and_the_policies_a_node_runs_under_are_out_of_reach(
        node_factory: NodeFactory, tmp_path: Path) -> None:
    """A config file and Cedar policies kept in the work dir (``work_dir = "."`` beside
    them) can be neither read (the config holds keys) nor rewritten or deleted (the next
    start would obey a policy of the agent's making); the work dir's other files can."""
    work = tmp_path / "project"
    work.mkdir()
    cedar = work / "policy.cedar"
    cedar.write_text('forbid(principal, action, resource) when { resource.name like "*prod*" };\n',
                     encoding="utf-8")
    config = work / "signoff.toml"
    config.write_text(f'[daemon]\nwork_dir = "{work}"\nstate_dir = "{tmp_path / "state"}"\n'
                      f'[api]\nkey = "abcdefghijklmnopqrstuvwxyz0123"\n'
                      f'[policy]\ncedar = "{cedar}"\n', encoding="utf-8")
    before = config.read_bytes(), cedar.read_bytes()
    node = await node_factory(settings=load_settings(config))
    for name in ("signoff.toml", "./sub/../policy.cedar", str(config)):
        assert "configuration" in await refused(node, "read_file", path=name)
    for name in ("signoff.toml", "policy.cedar"):
        assert "configuration" in await refused(node, "write_file", path=name, content="")
        assert "configuration" in await refused(node, "delete_file", path=name)
    task = await node.engine.submit("rewrite", steps=[
        Action(tool="write_file", args={"path": "signoff.toml", "content": "[policy]\n"})],
        claim=True)
    assert task is not None
    await node.engine.advance(task)
    assert (config.read_bytes(), cedar.read_bytes()) == before
    await tool(node, "write_file", path="notes.txt", content="fine")
    assert (await tool(node, "read_file", path="notes.txt"))["content"] == "fine"


async def test_the_daemons_own_code_is_never_written(node_factory: NodeFactory) -> None:
    """Writing into the daemon's Python environment (a ``.pth`` file runs at every start)
    or its package is refused, whatever the work dir; reading is not."""
    node = await node_factory()
    protected = node.engine.tool_context.protected
    site = Path(sysconfig.get_paths()["purelib"]) / "evil.pth"
    package = Path(audit.__file__).resolve()
    assert protected.why(site, write=True) == "is the daemon's own code"
    assert protected.why(package, write=True) == "is the daemon's own code"
    assert protected.why(package, write=False) is None
    assert protected.why(Path(sys.prefix) / "src" / "app" / "notes.txt", write=True) is None


async def test_what_the_daemon_imports_from_the_work_dir_is_never_written(
        node_factory: NodeFactory, settings_factory: SettingsFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Started as ``python -m signoff`` from its work dir, or with ``PYTHONPATH`` (or an
    editable install) pointing into it, the daemon imports from there before its own
    environment: a ``signoff/__init__.py`` or ``httpx.py`` the agent wrote there would run
    in the daemon at its next start, and a plug-in's module it loaded from there is its
    code. Writing them is refused; the rest of the work dir stays writable."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    plugin = work / "plugins" / "myplugin" / "__init__.py"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("TOOLS = []\n")
    monkeypatch.syspath_prepend(str(work / "src"))
    spec = importlib.util.spec_from_file_location("myplugin", plugin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "myplugin", module)  # as an editable finder loads it
    node = await node_factory(settings=settings_factory())
    for path in ("src/httpx.py", "src/signoff/__init__.py", "plugins/myplugin/__init__.py",
                 "plugins/myplugin/tools.py"):
        assert "own code" in await refused(node, "write_file", path=path, content="import os\n")
    assert plugin.read_text() == "TOOLS = []\n"
    await tool(node, "write_file", path="notes/plan.py", content="x = 1\n")
    await tool(node, "write_file", path="plugins/notes.txt", content="fine\n")
