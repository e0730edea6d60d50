"""Real nodes and servers for the API, console, contract and browser tests.

`running_node` builds a node with `build_node` (SQLite in a temporary directory unless a
store is given), the web console as its `web` surface, and runs the worker, the outbox
dispatcher and the console's `run()` as background tasks until the block ends.
`serve` puts an app on a real uvicorn server on a free port.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from signoff.adapters.web import WebSurface
from signoff.api.app import create_app
from signoff.api.context import ApiContext
from signoff.bot.ports import Surface
from signoff.config.settings import Settings
from signoff.runtime.clock import Clock
from signoff.runtime.store.port import TaskStore
from signoff.runtime.telemetry import Telemetry
from signoff.wiring import Node, api_context, build_node
from signoff.wiring.daemon import server_config

KEY = "admin-key-0123456789abcdef"
BOB_KEY = "bob-key-0123456789abcdef"
BASE = "http://127.0.0.1"


def state_beside(work_dir: Path) -> Path:
    """A test's own state dir beside its work dir (the default, ``signoff-state`` in the
    work dir's parent, would be shared by every test whose work dir is its tmp_path)."""
    return work_dir.with_name(f"{work_dir.name}-state")


def make_settings(work_dir: Path, *, keys: bool = True, host: str = "127.0.0.1",
                  **sections: Any) -> Settings:
    """Settings for a test node: the admin key and a named key ``bob`` unless ``keys=False``."""
    data: dict[str, Any] = {"daemon": {"work_dir": str(work_dir), "host": host,
                                       "state_dir": str(state_beside(work_dir)),
                                       "node_id": "test-node"}}
    if keys:
        data["api"] = {"key": KEY, "keys": [{"name": "bob", "key": BOB_KEY}]}
    data.update(sections)
    return Settings.model_validate(data)


@dataclass
class Running:
    """A node with its API app, running in the background."""

    node: Node
    web: WebSurface
    ctx: ApiContext
    app: FastAPI
    background: list[asyncio.Task[None]] = field(default_factory=list)

    def client(self, key: str | None = KEY, **kwargs: Any) -> httpx.AsyncClient:
        """An in-process client (ASGITransport) holding ``key``."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=BASE,
                                 headers=headers, **kwargs)


@contextlib.asynccontextmanager
async def running_node(work_dir: Path, *, keys: bool = True, store: TaskStore | None = None,
                       settings: Settings | None = None, clock: Clock | None = None,
                       surfaces: Mapping[str, Surface] | None = None,
                       telemetry: Telemetry | None = None,
                       **ctx_parts: Any) -> AsyncIterator[Running]:
    """Build and run a node with the web surface (and ``surfaces``, each running, its
    routes served by the app); stop it when the block ends."""
    web = WebSurface()
    chosen = settings or make_settings(work_dir, keys=keys)
    # The default state dir is beside the work dir: with the work dir a test's tmp_path,
    # every such test would share one database. Settings must name their own.
    assert chosen.daemon.state_dir is not None or work_dir.name == "work", (
        "give the test node its own daemon.state_dir (state_beside(work_dir))")
    others = dict(surfaces or {})
    node = build_node(chosen, work_dir=work_dir, store=store, surfaces={"web": web, **others},
                      clock=clock, telemetry=telemetry)
    ctx_parts.setdefault("extra_routes", [r for s in others.values() for r in s.routes()])
    await node.store.open()
    ctx = api_context(chosen, store=node.store, engine=node.engine,
                                   decider=node.decider, flow=node.flow, clock=node.clock,
                                   wake=node.worker.wake, web=web, **ctx_parts)
    app = create_app(ctx)
    running = Running(node=node, web=web, ctx=ctx, app=app)
    running.background = [
        asyncio.create_task(node.worker.run(), name="worker"),
        asyncio.create_task(node.flow.dispatcher.run(), name="outbox"),
        asyncio.create_task(web.run(node.flow.on_decision), name="web"),
        *(asyncio.create_task(s.run(node.flow.on_decision), name=name)
          for name, s in others.items()),
    ]
    try:
        yield running
    finally:
        await stop_all(running.background)
        await node.store.close()


async def stop_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel background tasks until they are all done.

    Cancelling once is not enough on Python 3.11: a loop sleeping in
    ``asyncio.wait_for(event.wait(), t)`` loses a cancellation that arrives in the same
    tick as ``event.set()`` (wait_for returns the inner result instead of raising). The
    worker's consumers and the outbox dispatcher sleep that way, and a just-approved task
    sets the worker's event, so a teardown right after an approval would hang. A second
    cancel of `Worker.run` does not reach its TaskGroup's children, so those are
    cancelled again by name.
    """
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
        if pending:
            for task in asyncio.all_tasks():
                if task.get_name().startswith("signoff-worker-"):
                    task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def loopback_socket() -> socket.socket:
    """A socket bound to a free loopback port (its address known before serving)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def serve(app: FastAPI, sock: socket.socket | None = None, *,
                trusted_proxies: Sequence[str] | None = None) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on ``sock`` (default: a free loopback port); yield its
    base URL. With ``trusted_proxies`` (even empty), on the daemon's own server settings
    (`server_config`) rather than uvicorn's defaults."""
    sock = sock or loopback_socket()
    port = sock.getsockname()[1]
    if trusted_proxies is None:
        config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none",
                                timeout_graceful_shutdown=2)
    else:
        config = server_config(app, "127.0.0.1", port, trusted_proxies)
        config.timeout_graceful_shutdown = 2
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.gather(task, return_exceptions=True)
        sock.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0,
                     what: str = "condition") -> None:
    """Poll ``check`` until it is true; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await check():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_state(client: httpx.AsyncClient, task_id: str, *states: str,
                     timeout: float = 10.0) -> dict[str, Any]:
    """GET the task until it is in one of ``states``; return its last JSON."""
    seen: dict[str, Any] = {}

    async def check() -> bool:
        nonlocal seen
        seen = (await client.get(f"/tasks/{task_id}")).json()
        return seen.get("state") in states

    await eventually(check, timeout, f"task {task_id} to reach {states} (last: {seen})")
    return seen


def webhook_steps(url: str, payload: Any = None) -> list[dict[str, Any]]:
    """One SEND step: POST ``payload`` to ``url``."""
    return [{"tool": "send_webhook", "args": {"url": url, "payload": payload or {"n": 1}}}]
