"""A stored row that cannot be read back (nested too deep by an older version, or damaged)
never stops the worker, the sweep, the pending list, the console or a restart: the task
is failed and the request expired with the reason, logged once, and the rest goes on."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from signoff.runtime.clock import FakeClock
from signoff.runtime.store.factory import make_store
from tests.api.helpers import Running, running_node, wait_state

HOOK = "https://hooks.example.com/x"
SEND = {"tool": "send_email", "args": {"to": "a@example.com", "subject": "s", "body": "b"},
        "requester": "agent", "policy_id": "s-1"}


def deep_json(levels: int = 220) -> str:
    """A task's JSON whose args nest ``levels`` deep, as 0.2 accepted and stored it."""
    return ('{"id": "x", "goal": "g", "steps": [{"tool": "send_webhook", "args": '
            + '{"a": ' * levels + '"x"' + "}" * levels + "}]}")


def raw(url: str, sql: str, **params: Any) -> list[Any]:
    """Run one statement on the database as an operator (or an older version) would."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(sql), params)
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


async def submit(client: httpx.AsyncClient, steps: list[dict[str, Any]]) -> str:
    answer = await client.post("/tasks", json={"goal": "g", "steps": steps})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


async def first_life(node: Running) -> dict[str, str]:
    """Rows of every kind: done, waiting and outside pending ones."""
    async with node.client() as client:
        ids = {"queued": await submit(client, [{"tool": "list_dir", "args": {"path": "."}}]),
               "orphan": await submit(client, [{"tool": "list_dir", "args": {"path": "."}}]),
               "waiting": await submit(client, [{"tool": "send_webhook",
                                                 "args": {"url": HOOK, "payload": {}}}])}
        for key in ("queued", "orphan"):
            await wait_state(client, ids[key], "completed")
        waiting = await wait_state(client, ids["waiting"], "waiting_approval")
        ids["waiting_approval"] = waiting["approval"]["id"]
        for key in ("bad_request", "good_request"):
            answer = await client.post("/v1/approvals", json=SEND)
            assert answer.status_code == 202, answer.text
            ids[key] = answer.json()["id"]
    return ids


def damage(url: str, ids: dict[str, str]) -> None:
    """What the old version left behind: unreadable rows in live states."""
    raw(url, "UPDATE tasks SET state = 'queued', data = :d WHERE id = :i",
        d=deep_json(), i=ids["queued"])
    raw(url, "UPDATE tasks SET state = 'in_progress', claimed_by = 'test-node', "
             "data = :d WHERE id = :i", d='{"id": "truncated', i=ids["orphan"])
    raw(url, "UPDATE tasks SET data = :d WHERE id = :i", d=deep_json(), i=ids["waiting"])
    raw(url, "UPDATE approvals SET data = :d WHERE id = :i", d=deep_json(),
        i=ids["bad_request"])


async def test_unreadable_rows_are_set_aside_and_everything_else_goes_on(
        tmp_path: Path, store_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Unreadable tasks (queued, orphaned, waiting) fail with the reason and an unreadable
    request reads expired, then is expired by the sweep; claims, recovery, the pending list,
    the console and new work all keep working, and each bad row is logged once."""
    clock = FakeClock()
    async with running_node(tmp_path, store=make_store(store_url), clock=clock) as node:
        ids = await first_life(node)
    damage(store_url, ids)
    caplog.set_level(logging.ERROR, logger="signoff.runtime.store.readers")
    async with running_node(tmp_path, store=make_store(store_url), clock=clock) as node, \
            node.client() as client:
        await node.node.engine.recover()  # what a restart does first
        for key in ("queued", "orphan"):
            failed = await wait_state(client, ids[key], "failed")
            assert "cannot be read" in failed["result"]["reason"], failed
        fresh = await submit(client, [{"tool": "list_dir", "args": {"path": "."}}])
        await wait_state(client, fresh, "completed")
        listed = await client.get("/approvals")
        assert listed.status_code == 200, listed.text
        assert [i["id"] for i in listed.json()["items"]] == [ids["good_request"]]
        assert (await client.get("/")).status_code == 200
        assert (await client.get("/tasks")).status_code == 200
        status = (await client.get(f"/v1/approvals/{ids['bad_request']}")).json()
        assert status["status"] == "expired" and "cannot be read" in status["reason"]
        decided = await client.post(f"/approvals/{ids['bad_request']}/approve")
        assert decided.status_code == 409
        clock.advance(timedelta(days=2))
        await node.node.decider.expire_due()
        assert (await client.get(f"/tasks/{ids['waiting']}")).json()["state"] == "failed"
    rows = raw(store_url, "SELECT id, status FROM approvals WHERE id IN (:a, :b)",
               a=ids["bad_request"], b=ids["waiting_approval"])
    assert {r[1] for r in rows} == {"expired"}
    state = raw(store_url, "SELECT state FROM tasks WHERE id = :i", i=ids["waiting"])
    assert state == [("failed",)]
    logged = [r.record_id for r in caplog.records  # type: ignore[attr-defined]
              if r.getMessage() == "stored_record_unreadable"]
    assert sorted(logged) == sorted(set(logged)) and ids["queued"] in logged
