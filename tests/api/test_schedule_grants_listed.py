"""`GET /grants` and `signoff grants` say which of a schedule's Always grants still cover
its runs: after its goal is edited (or it is removed) the old ones are ``superseded``,
not ``live``, while an unchanged schedule's stay live — daemon lives on one SQLite file,
each with its own [[schedules]]."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from signoff.runtime.models import Grant, RiskClass, Scope
from signoff.runtime.store.port import Change
from tests.api.helpers import KEY, Running, make_settings, running_node, serve, wait_state
from tests.fakes.http_echo import HttpEcho

T = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def schedule(name: str, echo: HttpEcho, goal: str) -> dict[str, Any]:
    """A schedule whose one step posts its name to the echo's hook (a SEND a person
    answers)."""
    step = {"tool": "send_webhook", "args": {"url": echo.url("/hook"), "payload": {"from": name}}}
    return {"name": name, "cron": "0 3 * * *", "goal": goal, "steps": [step]}


def life(work_dir: Path, *schedules: dict[str, Any]) -> Any:
    """One daemon life on the work dir's database, configured with ``schedules``; their
    runs ask (cron_mode = "ask")."""
    settings = make_settings(work_dir, schedules=list(schedules),
                             approvals={"cron_mode": "ask"})
    return running_node(work_dir, settings=settings)


async def approve_always(running: Running, name: str) -> None:
    """Fire ``name`` once and answer its card with Always over the API."""
    assert running.node.scheduler is not None
    fired = await running.node.scheduler.fire(name, T)
    assert fired is not None
    async with running.client() as client:
        await wait_state(client, fired.id, "waiting_approval")
        answered = await client.post(f"/tasks/{fired.id}/approve", json={"scope": "always"})
        assert answered.status_code == 200, answered.text
        done = await wait_state(client, fired.id, "completed", "failed")
        assert done["state"] == "completed", done


async def statuses(running: Running) -> dict[str, str]:
    """Each listed grant's status by its policy_id (GET /grants)."""
    async with running.client() as client:
        items = (await client.get("/grants")).json()["items"]
    return {g["policy_id"]: g["status"] for g in items}


async def signoff_grants(base: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `signoff grants` against ``base``, on an 80-column terminal."""
    env = {**os.environ, "COLUMNS": "80", "SIGNOFF_URL": "", "SIGNOFF_API_KEY": ""}
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "signoff", "grants", "--url", base,
                         "--api-key", KEY, *args],
        capture_output=True, text=True, timeout=60, check=False, env=env)


async def test_an_edited_goal_supersedes_its_always_in_the_api_and_the_cli(
        tmp_path: Path, echo: HttpEcho) -> None:
    """"nightly" and "weekly" each get an Always; the next life edits nightly's goal and
    drops "monthly": nightly's and monthly's old grants list as superseded (JSON and
    table), weekly's, defined as before, as live."""
    work = tmp_path / "work"
    nightly = schedule("nightly", echo, "ping the nightly hook")
    weekly = schedule("weekly", echo, "ping the weekly hook")
    monthly = schedule("monthly", echo, "ping the monthly hook")
    async with life(work, nightly, weekly, monthly) as first:
        for name in ("nightly", "weekly", "monthly"):
            await approve_always(first, name)
        assert await statuses(first) == {"nightly": "live", "weekly": "live",
                                         "monthly": "live"}
    edited = {**nightly, "goal": "ping the nightly hook and tell the team"}
    async with life(work, edited, weekly) as second, serve(second.app) as base:
        assert await statuses(second) == {"nightly": "superseded", "weekly": "live",
                                          "monthly": "superseded"}
        listed = await signoff_grants(base, "--json")
        assert listed.returncode == 0, listed.stderr
        assert {g["policy_id"]: g["status"] for g in json.loads(listed.stdout)["items"]} == {
            "nightly": "superseded", "weekly": "live", "monthly": "superseded"}
        table = await signoff_grants(base)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert all(len(line.rstrip()) <= 80 for line in lines), table.stdout
        by_schedule = {name: next(line for line in lines if f" {name} " in line)
                       for name in ("nightly", "weekly", "monthly")}
        assert " superseded " in by_schedule["nightly"], table.stdout
        assert " superseded " in by_schedule["monthly"], table.stdout
        assert " live " in by_schedule["weekly"] and "superseded" not in by_schedule["weekly"]


async def test_the_edit_undone_makes_the_grant_live_again(tmp_path: Path,
                                                         echo: HttpEcho) -> None:
    """Superseded says what covers now, not what once happened: the schedule defined as
    it was again lists its old Always as live (it covers its runs again)."""
    work = tmp_path / "work"
    nightly = schedule("nightly", echo, "ping the nightly hook")
    async with life(work, nightly) as first:
        await approve_always(first, "nightly")
    async with life(work, {**nightly, "goal": "something else"}) as second:
        assert await statuses(second) == {"nightly": "superseded"}
    async with life(work, nightly) as third:
        assert await statuses(third) == {"nightly": "live"}


async def test_a_grant_from_before_definitions_is_superseded(tmp_path: Path) -> None:
    """An Always a scheduled run was given before grants carried a definition (none
    stored) covers no run the scheduler fires: it lists as superseded; a task's own
    Always (no schedule) stays live."""
    work = tmp_path / "work"
    kept = {"name": "nightly", "cron": "0 3 * * *", "goal": "say hello"}
    async with life(work, kept) as running:
        now = running.node.clock.now()
        old = Grant(id="g-old", key="signoff:nightly:k", policy_id="nightly", task_id="t-1",
                    scope=Scope.ALWAYS, tool="send_webhook", capability="net.send",
                    risk=RiskClass.SEND, fingerprint="f", created_at=now)
        own = old.model_copy(update={"id": "g-own", "key": "signoff:t-2:k",
                                     "policy_id": "t-2", "task_id": "t-2"})
        assert await running.node.store.commit(Change(at=now, grants=[old, own]))
        assert await statuses(running) == {"nightly": "superseded", "t-2": "live"}
