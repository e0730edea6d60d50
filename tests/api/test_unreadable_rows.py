"""A stored row that cannot be read back (nested too deep by an older version, or damaged)
never stops the worker, the sweep, the pending list, the console or a restart: the task
is failed and the request expired with the reason, logged once, and the rest goes on."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from signoff.runtime.clock import FakeClock
from signoff.runtime.store.factory import make_store
from tests.api.helpers import BOB_KEY, Running, eventually, running_node, wait_state

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


async def test_an_unreadable_grant_grants_nothing_and_the_rest_goes_on(
        tmp_path: Path, store_url: str) -> None:
    """A damaged always grant covers nothing (the same request asks a person again), the
    grant listing leaves it out and keeps working, and the readable grants still apply."""
    clock = FakeClock()
    other = {**SEND, "args": {**SEND["args"], "to": "b@example.com"}}
    async with running_node(tmp_path, store=make_store(store_url), clock=clock) as node, \
            node.client() as client, node.client(key=BOB_KEY) as bob:
        for body in (SEND, other):
            asked = (await bob.post("/v1/approvals", json=body)).json()
            answer = await client.post(f"/approvals/{asked['id']}/approve",
                                       json={"scope": "always"})
            assert answer.status_code == 200, answer.text
        grants = (await client.get("/grants")).json()["items"]
        assert len(grants) == 2
    bad = raw(store_url, "SELECT id FROM grants ORDER BY seq")[0][0]
    raw(store_url, "UPDATE grants SET data = :d WHERE id = :i", d='{"id": "trunc', i=bad)
    async with running_node(tmp_path, store=make_store(store_url), clock=clock) as node, \
            node.client() as client, node.client(key=BOB_KEY) as bob:
        listed = await client.get("/grants")
        assert listed.status_code == 200, listed.text
        assert bad not in [g["id"] for g in listed.json()["items"]]
        again = await bob.post("/v1/approvals", json=SEND)
        assert again.status_code == 202, again.text
        assert again.json()["status"] == "pending", again.json()
        covered = await bob.post("/v1/approvals", json=other)
        assert covered.json()["status"] == "approved", covered.json()
        assert (await client.delete(f"/grants/{bad}")).status_code == 404


async def test_an_unreadable_outbox_job_is_given_up_and_cards_still_go_out(
        tmp_path: Path, store_url: str) -> None:
    """Outbox jobs whose payload is not a JSON object are given up with the reason; the
    cards queued after them are still posted (they used to wait behind them for good)."""
    clock = FakeClock()
    async with running_node(tmp_path, store=make_store(store_url), clock=clock) as node, \
            node.client() as client:
        assert (await client.post("/v1/approvals", json=SEND)).status_code == 202
    for key, payload in (("bad-1", '{"text": "trunc'), ("bad-2", "[1, 2]")):
        raw(store_url, "INSERT INTO outbox (key, surface, kind, payload, attempts, done, "
                       "next_at) SELECT :k, 'web', 'notify', :p, 0, false, next_at "
                       "FROM outbox ORDER BY id LIMIT 1", k=key, p=payload)
    async with running_node(tmp_path, store=make_store(store_url), clock=clock) as node, \
            node.client() as client:
        fresh = {**SEND, "args": {**SEND["args"], "to": "c@example.com"}}
        asked = (await client.post("/v1/approvals", json=fresh)).json()

        async def posted() -> bool:
            return bool(raw(store_url, "SELECT id FROM outbox WHERE approval_id = :a AND "
                                       "surface = 'web' AND kind = 'post' AND done = true",
                            a=asked["id"]))

        await eventually(posted, what="the new request's card to be posted")
    rows = raw(store_url, "SELECT key, done, error FROM outbox WHERE key LIKE 'bad-%' "
                          "ORDER BY key")
    assert [(r[0], bool(r[1])) for r in rows] == [("bad-1", True), ("bad-2", True)]
    assert all("cannot be read" in r[2] for r in rows), rows


async def test_an_unreadable_transcript_message_is_shown_in_its_place(
        tmp_path: Path, store_url: str) -> None:
    """A damaged message of an agent's transcript reads as a note saying it cannot be read,
    in its place: the transcript API pages on past it and the console's task page shows."""
    async with running_node(tmp_path, store=make_store(store_url)) as node, \
            node.client() as client:
        task_id = await submit(client, [{"tool": "list_dir", "args": {"path": "."}}])
        await wait_state(client, task_id, "completed")
    def good(seq: int) -> str:
        return json.dumps({"task_id": task_id, "seq": seq, "role": "user", "content": "hello"})

    for seq, data in ((0, good(0)), (1, '{"task_id": "trunc'), (2, good(2))):
        raw(store_url, "INSERT INTO transcript (task_id, seq, role, at, data) VALUES "
                       "(:i, :s, 'user', '2026-01-01 00:00:00.000000', :d)",
            s=seq, d=data, i=task_id)
    async with running_node(tmp_path, store=make_store(store_url)) as node, \
            node.client() as client:
        first = await client.get(f"/tasks/{task_id}/transcript", params={"limit": 2})
        assert first.status_code == 200, first.text
        items = first.json()["items"]
        assert [i["content"][:8] for i in items] == ["hello", "(the sto"]
        assert "cannot be read" in items[1]["content"]
        rest = await client.get(f"/tasks/{task_id}/transcript",
                                params={"cursor": first.json()["next_cursor"]})
        assert [i["content"] for i in rest.json()["items"]] == ["hello"]
        page = await client.get(f"/console/tasks/{task_id}")
        assert page.status_code == 200 and "cannot be read" in page.text
