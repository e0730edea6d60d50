"""`signoff schedules`, `signoff schedules run NAME` and `signoff oncall` on a real config
file and SQLite database (the commands need no running daemon)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from signoff.bot.outbox import FOREVER
from signoff.cli.schedules import parse_at, register
from signoff.runtime.models import TaskState
from signoff.wiring import load_node

CONFIG = """
[daemon]
work_dir = "{work}"

[[schedules]]
name = "nightly"
cron = "0 3 * * *"
timezone = "Europe/Berlin"
steps = [{{ tool = "list_dir", args = {{ path = "." }} }}]

[[schedules]]
name = "paused"
every = "15m"
enabled = false
goal = "tidy up"

[[oncall.rotations]]
name = "primary"
members = ["slack:UA", "slack:UB"]
period = "1w"
handoff = "mon 09:00"
timezone = "Europe/Berlin"
start = 2026-11-02
escalate_after = "10m"
next = "secondary"

[[oncall.rotations]]
name = "secondary"
members = ["slack:UC"]

[[oncall.overrides]]
who = "slack:UZ"
from = 2026-12-24T00:00:00Z
until = 2026-12-27T00:00:00Z
rotation = "primary"
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A config file with two schedules and two rotations."""
    path = tmp_path / "signoff.toml"
    path.write_text(CONFIG.format(work=tmp_path / "work"))
    return path


@pytest.fixture
def app() -> typer.Typer:
    """A bare app with only these commands registered."""
    app = typer.Typer()
    register(app, load_node=load_node)
    return app


def run(app: typer.Typer, *args: str) -> tuple[int, str]:
    """Invoke the CLI; (exit code, stdout)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_schedules_json_lists_next_fire_times_and_last_run(app: typer.Typer, config: Path
                                                           ) -> None:
    """`schedules --json`: both schedules, next times in the schedule zone, no run yet."""
    code, out = run(app, "schedules", "--config", str(config), "--json")
    assert code == 0, out
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == {"nightly", "paused"}
    assert len(rows["nightly"]["next_local"]) == 3
    assert all(t[11:16] == "03:00" for t in rows["nightly"]["next_local"])
    assert rows["paused"]["enabled"] is False and rows["paused"]["next_utc"] == []
    assert rows["nightly"]["last_run"] is None


def test_schedules_in_a_skipped_dst_hour_list_each_instant_once(app: typer.Typer,
                                                                tmp_path: Path) -> None:
    """`*/30 2,3 14 3 *` in New York: 2027-03-14 03:00 and 03:30 EDT once each, increasing."""
    path = tmp_path / "dst.toml"
    path.write_text(f'[daemon]\nwork_dir = "{tmp_path / "work"}"\n\n[[schedules]]\n'
                    'name = "gap"\ncron = "*/30 2,3 14 3 *"\ntimezone = "America/New_York"\n'
                    'steps = [{ tool = "list_dir", args = { path = "." } }]\n')
    code, out = run(app, "schedules", "--config", str(path), "--json",
                    "--at", "2027-03-01T00:00:00Z")
    assert code == 0, out
    (row,) = json.loads(out)
    assert row["next_local"] == ["2027-03-14T03:00:00-04:00", "2027-03-14T03:30:00-04:00",
                                 "2028-03-14T02:00:00-04:00"]
    assert row["next_utc"] == sorted(set(row["next_utc"]))


def test_schedules_run_queues_a_task_the_daemon_will_pick_up(app: typer.Typer, config: Path
                                                             ) -> None:
    """`schedules run NAME` prints a task id that is queued in the daemon's database."""
    code, out = run(app, "schedules", "run", "nightly", "--config", str(config))
    assert code == 0, out
    task_id = out.strip()

    async def stored() -> object:
        node = load_node(str(config))
        await node.store.open()
        try:
            return await node.store.get_task(task_id)
        finally:
            await node.store.close()

    task = asyncio.run(stored())
    assert getattr(task, "state", None) is TaskState.QUEUED
    assert getattr(task, "schedule", None) == "nightly"
    code, out = run(app, "schedules", "--config", str(config), "--json")
    last = {r["name"]: r["last_run"] for r in json.loads(out)}["nightly"]
    assert (last["task_id"], last["outcome"]) == (task_id, "queued")


def test_schedules_table_is_readable(app: typer.Typer, config: Path) -> None:
    """The table names each schedule and shows 'disabled' for a disabled one."""
    code, out = run(app, "schedules", "--config", str(config))
    assert code == 0, out
    assert "nightly" in out and "paused" in out and "disabled" in out


def test_schedules_table_keeps_names_and_task_ids_whole_at_80_columns(
        app: typer.Typer, config: Path) -> None:
    """At 80 columns the schedule's name, the last run's task id and its outcome are
    whole on their lines; only the times and cron lines fold."""
    code, task_id = run(app, "schedules", "run", "nightly", "--config", str(config))
    assert code == 0, task_id
    result = CliRunner().invoke(app, ["schedules", "--config", str(config)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["Schedule", "When", "Mode", "Next", "Last", "run", "Outcome"]
    assert all(len(line.rstrip()) <= 80 for line in lines), result.output
    nightly = next(line for line in lines if line.startswith("nightly "))
    assert task_id.strip() in nightly and nightly.rstrip().endswith("queued")


def test_unknown_schedule_is_a_usage_error(app: typer.Typer, config: Path) -> None:
    """`schedules run nope` exits 2 and names the known schedules."""
    result = CliRunner().invoke(app, ["schedules", "run", "nope", "--config", str(config)])
    assert result.exit_code == 2
    assert "no schedule named 'nope' (known: nightly, paused)" in result.output


def test_oncall_at_a_time_shows_who_until_when(app: typer.Typer, config: Path) -> None:
    """`oncall --at`: the member of each rotation, since/until, escalation target."""
    code, out = run(app, "oncall", "--config", str(config), "--at", "2026-11-30T12:00:00Z",
                    "--json")
    assert code == 0, out
    body = json.loads(out)
    assert body["on_call"] == ["slack:UA"]  # only the first line approves
    shifts = {s["rotation"]: s for s in body["rotations"]}
    assert shifts["primary"]["member"] == "slack:UA"  # 4 weeks after 11-02: back to UA
    assert shifts["primary"]["until"] == "2026-12-07T08:00:00+00:00"
    assert shifts["primary"]["escalates_to"] == "secondary"
    assert shifts["secondary"]["member"] == "slack:UC"


def test_oncall_shows_an_override(app: typer.Typer, config: Path) -> None:
    """During an override the table names the stand-in and says so."""
    code, out = run(app, "oncall", "--config", str(config), "--at", "2026-12-25T12:00:00Z")
    assert code == 0, out
    assert "slack:UZ" in out and "override" in out


def test_bad_time_and_bad_config_exit_2(app: typer.Typer, config: Path, tmp_path: Path) -> None:
    """An unreadable --at or a broken config file is a usage error."""
    result = CliRunner().invoke(app, ["oncall", "--config", str(config), "--at", "soon"])
    assert result.exit_code == 2 and "invalid time 'soon'" in result.output
    broken = tmp_path / "broken.toml"
    broken.write_text('[[schedules]]\nname = "x"\ncron = "0 9 * * 8"\ngoal = "g"\n')
    result = CliRunner().invoke(app, ["schedules", "--config", str(broken)])
    assert result.exit_code == 2 and "schedules[0].cron" in result.output


def test_parse_at_forms() -> None:
    """--at accepts now, +duration and ISO 8601 (with or without an offset)."""
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    assert parse_at(None, now) == parse_at("now", now) == now
    assert parse_at("+2h", now) == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert parse_at("2026-12-01T09:00+01:00", now) == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert parse_at("2026-12-01T09:00", now).tzinfo is UTC


def test_schedules_run_announces_the_run_as_queued(app: typer.Typer, tmp_path: Path) -> None:
    """`schedules run NAME` writes the "queued" team line, as a scheduled fire does: the
    daemon's outbox delivers it to the channel."""
    path = tmp_path / "notify.toml"
    path.write_text(CONFIG.format(work=tmp_path / "work") + """
[slack]
bot_token = "xoxb-1-2-abc"
channel = "C0APPROVALS"
mode = "http"
signing_secret = "8f742231b10e8888abcd99yyyzzz85a5"

[[notify]]
channel = "slack:C0TEAM"
events = ["queued"]
""")
    code, task_id = run(app, "schedules", "run", "nightly", "--config", str(path))
    assert code == 0, task_id

    async def lines() -> list[str]:
        node = load_node(str(path))
        await node.store.open()
        try:
            items = await node.store.due_outbox(FOREVER, limit=100)
        finally:
            await node.store.close()
        return [str(i.payload.get("text")) for i in items
                if i.kind == "notify" and i.payload.get("channel") == "C0TEAM"]

    [line] = asyncio.run(lines())
    assert line.startswith("📥 queued: ") and "(schedule nightly)" in line
    assert task_id.strip() in line
