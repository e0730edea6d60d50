"""Every table the local CLI commands print (`schedules`, `oncall`, `tools`, `nodes`,
`audit`) fits 80 columns with long names in it: cut with "…", never wrapped."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from signoff.cli.main import _register_extras, app
from signoff.runtime.models import AuditEvent
from signoff.runtime.store.port import Change, NodeRecord
from signoff.wiring import load_node

LONG = "a-rather-long-name-that-nobody-would-want-to-read-in-full-" * 2

CONFIG = """
[daemon]
work_dir = "{work}"
state_dir = "{state}"
node_id = "{long}node"

[[schedules]]
name = "{long}schedule"
cron = "0 3 * * *"
steps = [{{ tool = "write_file", args = {{ path = "{long}.txt", content = "x" }} }}]

[[oncall.rotations]]
name = "{long}rotation"
members = ["slack:U{upper}"]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A config full of long names, a database with a run of the schedule and a node."""
    work = tmp_path / "work"
    work.mkdir()
    path = tmp_path / "signoff.toml"
    path.write_text(CONFIG.format(work=work, state=tmp_path / "state", long=LONG,
                                  upper=LONG.upper().replace("-", "")))
    assert run("schedules", "run", f"{LONG}schedule", "--config", str(path))[0] == 0

    async def beat() -> None:
        node = load_node(str(path))
        await node.store.open()
        now = node.clock.now()
        await node.store.beat(NodeRecord(id=f"{LONG}node", host=f"{LONG}host",
                                         started_at=now, last_beat=now,
                                         live_until=now + timedelta(hours=1), running=0),
                              forget_before=now - timedelta(days=1))
        await node.store.commit(Change(at=now, audit=[AuditEvent(
            kind="decision", at=now, task_id="t-1", actor=f"web:{LONG}", decision="approve",
            scope="once", tool="write_file", targets=[LONG], reason=LONG)]))
        await node.store.close()

    asyncio.run(beat())
    return path


def run(*args: str) -> tuple[int, str]:
    _register_extras()
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.output


@pytest.mark.parametrize("command", [["schedules"], ["oncall"], ["tools"], ["nodes"],
                                     ["audit"]])
def test_a_listing_fits_80_columns_and_cuts_with_an_ellipsis(config: Path,
                                                            command: list[str]) -> None:
    """No line is wider than 80 columns; what did not fit ends in "…"."""
    code, output = run(*command, "--config", str(config))
    assert code == 0, output
    lines = output.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), output
    if command != ["tools"]:  # the built-in tools' names are short: nothing to cut
        assert "…" in output, output
