"""Many parked long polls cost no task or thread of their own, and one decision answers
them all."""

from __future__ import annotations

import asyncio
import threading

import httpx

from tests.api.helpers import Running

ASK = {"tool": "send_email", "args": {"to": "john@example.com", "subject": "hi", "body": "x"},
       "requester": "hermes:alice@laptop", "policy_id": "s-1"}
FIRST, MORE = 20, 180
BOUND = 60.0  # an upper bound on waits that end far sooner, never a sleep


async def parked(node: Running, count: int) -> None:
    async with asyncio.timeout(BOUND):
        while node.node.decider.watch.waiting < count:
            await asyncio.sleep(0.01)


async def test_parked_waiters_add_no_task_or_thread(node: Running, client: httpx.AsyncClient,
                                                    agent: httpx.AsyncClient) -> None:
    """180 more parked waiters add no task of their own beyond the 180 this test made to
    send them (the in-process client runs each request in its caller's task) and no
    thread; the decision answers every waiter ``approved``."""
    asked = await agent.post("/v1/approvals", json=ASK)
    approval_id = asked.json()["id"]

    def poll() -> asyncio.Task[httpx.Response]:
        return asyncio.create_task(agent.get(f"/v1/approvals/{approval_id}",
                                             params={"wait": "60s"}, timeout=120))

    waiters = [poll() for _ in range(FIRST)]
    await parked(node, FIRST)  # the store's threads and the shared re-check are started
    tasks, threads = asyncio.all_tasks() - set(waiters), threading.active_count()
    waiters += [poll() for _ in range(MORE)]
    await parked(node, FIRST + MORE)
    # Tasks may come and go with the node's own background work (its sweeps, a card's
    # delivery, the watch's one shared re-check), never one per parked waiter.
    added = asyncio.all_tasks() - set(waiters) - tasks
    assert len(added) < MORE // 10, sorted(repr(t.get_coro()) for t in added)
    assert threading.active_count() == threads
    decided = await client.post(f"/approvals/{approval_id}/approve", json={"scope": "once"})
    assert decided.status_code == 200
    async with asyncio.timeout(BOUND):
        answers = await asyncio.gather(*waiters)
    assert {(a.status_code, a.json()["status"]) for a in answers} == {(200, "approved")}
    # A waiter woken by the decision hears exactly what the route answers afterwards.
    plain = await agent.get(f"/v1/approvals/{approval_id}")
    assert answers[-1].json() == plain.json()
    assert answers[-1].headers["content-type"] == plain.headers["content-type"]
    assert node.node.decider.watch.waiting == 0


async def test_a_long_poll_of_nothing_answers_at_once(node: Running,
                                                      agent: httpx.AsyncClient) -> None:
    """An unknown request is 404 without waiting; a malformed wait is the route's 422."""
    unknown = await agent.get("/v1/approvals/a-unknown", params={"wait": "60s"}, timeout=BOUND)
    assert unknown.status_code == 404
    asked = await agent.post("/v1/approvals", json=ASK)
    bad = await agent.get(f"/v1/approvals/{asked.json()['id']}", params={"wait": "soon"})
    assert bad.status_code == 422 and "wait" in bad.text
    assert node.node.decider.watch.waiting == 0
