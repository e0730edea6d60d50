"""Racing answers: twenty simultaneous approvals give one 200, nineteen 409, one execution."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import TaskStore
from tests.api.helpers import BOB_KEY, running_node, wait_state, webhook_steps
from tests.fakes.http_echo import HttpEcho


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
async def test_twenty_simultaneous_approvals_run_the_action_once(
        tmp_path: Path, echo: HttpEcho, backend: str) -> None:
    """20 concurrent POST /tasks/{id}/approve: exactly one 200, nineteen 409, one webhook."""
    store: TaskStore | None = MemTaskStore() if backend == "memory" else None
    async with running_node(tmp_path, store=store) as node, node.client() as client:
        submitted = await client.post("/tasks", json={
            "goal": "race", "steps": webhook_steps(echo.url("/hook"), {"race": True})})
        task_id = submitted.json()["id"]
        await wait_state(client, task_id, "waiting_approval")
        scopes = ["once", "session", "always"]
        answers = await asyncio.gather(*(
            client.post(f"/tasks/{task_id}/approve", json={"scope": scopes[i % 3]})
            for i in range(20)))
        codes = sorted(r.status_code for r in answers)
        assert codes == [200] + [409] * 19
        for lost in (r for r in answers if r.status_code == 409):
            assert lost.json()["state"] in ("in_progress", "completed")
        done = await wait_state(client, task_id, "completed")
        await asyncio.sleep(0.2)  # give a wrongly doubled execution time to show up
    assert sum(1 for r in echo.requests if r.path == "/hook") == 1
    assert len(done["actions"]) == 1


async def test_racing_approve_and_deny_from_two_people(tmp_path: Path, echo: HttpEcho) -> None:
    """An approve and a deny racing from two keys: one wins, the other gets 409."""
    async with running_node(tmp_path) as node, node.client() as admin, \
            node.client(key=BOB_KEY) as bob:
        submitted = await admin.post("/tasks", json={
            "goal": "race", "steps": webhook_steps(echo.url("/hook"))})
        task_id = submitted.json()["id"]
        await wait_state(admin, task_id, "waiting_approval")
        approve, deny = await asyncio.gather(
            admin.post(f"/tasks/{task_id}/approve", json={"scope": "once"}),
            bob.post(f"/tasks/{task_id}/deny", json={"reason": "no"}))
        assert sorted([approve.status_code, deny.status_code]) == [200, 409]
        final = await wait_state(admin, task_id, "completed", "failed")
        await asyncio.sleep(0.2)
        sent = sum(1 for r in echo.requests if r.path == "/hook")
        assert sent == (1 if final["state"] == "completed" else 0)
        events = (await admin.get("/audit", params={"task": task_id})).json()["items"]
        assert len([e for e in events if e["kind"] == "decision"]) == 1
