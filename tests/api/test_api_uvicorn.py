"""The API on a real uvicorn server on a free port: routes, races over TCP, live events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from signoff.runtime.models import Scope
from tests.api.helpers import KEY, Running, serve, wait_state, webhook_steps
from tests.fakes.http_echo import HttpEcho

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
async def base(node: Running) -> AsyncIterator[str]:
    async with serve(node.app) as url:
        yield url


@pytest.fixture
async def http(base: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=10) as c:
        yield c


class EventReader:
    """Reads named events off an open text/event-stream response."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()

    async def next_event(self, timeout: float = 10.0) -> tuple[str, str]:
        name, data = "message", ""
        async with asyncio.timeout(timeout):
            async for line in self.lines:
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data = line[5:].strip()
                elif line == "" and data:
                    return name, data
        raise AssertionError("the stream ended")

    async def wait_for(self, name: str, timeout: float = 10.0) -> str:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            got, data = await self.next_event(max(end - loop.time(), 0.01))
            if got == name:
                return data


async def test_routes_over_tcp(http: httpx.AsyncClient, base: str, echo: HttpEcho) -> None:
    """Health, submit, approve and read back work through a real socket."""
    async with httpx.AsyncClient(base_url=base) as anonymous:
        assert (await anonymous.get("/health")).json()["status"] == "ok"
        assert (await anonymous.get("/tasks")).status_code == 401
    submitted = await http.post("/tasks", json={"goal": "g",
                                                "steps": webhook_steps(echo.url("/hook"))})
    assert submitted.status_code == 202
    task_id = submitted.json()["id"]
    await wait_state(http, task_id, "waiting_approval")
    assert (await http.post(f"/tasks/{task_id}/approve", json={"scope": "once"})).status_code == 200
    done = await wait_state(http, task_id, "completed")
    assert isinstance(done["result"], dict)
    assert (await http.get("/metrics")).text.count("signoff_tasks{") == 6


async def test_oversized_body_over_tcp_is_413(http: httpx.AsyncClient) -> None:
    """A 2 MiB body sent over a socket is cut off with 413."""
    response = await http.post("/tasks", content=b"x" * (2 * 1024 * 1024),
                               headers={"content-type": "application/json"})
    assert response.status_code == 413


async def test_twenty_simultaneous_approvals_over_tcp(http: httpx.AsyncClient,
                                                      echo: HttpEcho) -> None:
    """Twenty racing approvals over real connections: one 200, nineteen 409, one send."""
    submitted = await http.post("/tasks", json={"goal": "g",
                                                "steps": webhook_steps(echo.url("/hook"))})
    task_id = submitted.json()["id"]
    await wait_state(http, task_id, "waiting_approval")
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=str(http.base_url), headers=AUTH, limits=limits,
                                 timeout=10) as many:
        answers = await asyncio.gather(*(many.post(f"/tasks/{task_id}/approve", json={})
                                         for _ in range(20)))
    assert sorted(r.status_code for r in answers) == [200] + [409] * 19
    await wait_state(http, task_id, "completed")
    await asyncio.sleep(0.2)
    assert sum(1 for r in echo.requests if r.path == "/hook") == 1


async def test_events_announce_a_new_card(node: Running, http: httpx.AsyncClient,
                                          echo: HttpEcho) -> None:
    """An open /events stream gets a refresh when a card is posted to the console."""
    async with http.stream("GET", "/events") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = EventReader(stream)
        assert await events.wait_for("hello") == "{}"
        await http.post("/tasks", json={"goal": "g", "steps": webhook_steps(echo.url("/hook"))})
        data = json.loads(await events.wait_for("refresh", timeout=5))
        assert data["why"] in ("card", "poll")


async def test_events_notice_decisions_made_on_another_node(
        node: Running, http: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A decision written straight to the shared store (no local card) still refreshes."""
    submitted = await http.post("/tasks", json={"goal": "g",
                                                "steps": webhook_steps(echo.url("/hook"))})
    task = await wait_state(http, submitted.json()["id"], "waiting_approval")
    await asyncio.sleep(0.3)  # let the card post settle before listening
    async with http.stream("GET", "/events") as stream:
        events = EventReader(stream)
        await events.wait_for("hello")
        # Detach the console from the flow's outbox: only the store changes now.
        node.node.flow.surfaces.pop("web")
        result = await node.node.decider.decide(task["approval"]["id"], Scope.DENY,
                                                "telegram:42")
        assert result.accepted
        data = json.loads(await events.wait_for("refresh", timeout=6))
        assert data["why"] == "poll"


async def test_events_end_when_the_console_stops(node: Running, http: httpx.AsyncClient) -> None:
    """Stopping the web surface ends open streams, so the server can shut down."""
    async with http.stream("GET", "/events") as stream:
        events = EventReader(stream)
        await events.wait_for("hello")
        node.background[2].cancel()  # the web platform's run()
        with pytest.raises(AssertionError, match="ended"):
            await events.wait_for("refresh", timeout=5)


async def test_events_need_a_key(base: str) -> None:
    """/events is behind the key like every other console route."""
    async with httpx.AsyncClient(base_url=base) as anonymous:
        assert (await anonymous.get("/events")).status_code == 401

