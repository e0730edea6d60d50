"""Traffic for real daemons through outages: SEND tasks submitted to alternating nodes and
approved as they come, retried on 503/507 (an outage says: try again), into an HTTP
sink (`HttpEcho`, in a thread of its own) that counts what each approved action sent.
Used by tests/e2e/test_outages.py and bench/outages.py."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx

from tests.e2e.daemons import DaemonProcess
from tests.fakes.http_echo import HttpEcho


class EchoThread:
    """`HttpEcho` on its own event loop in a thread, for synchronous tests."""

    def __init__(self) -> None:
        self.echo = HttpEcho()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> HttpEcho:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.echo.__aenter__(), self._loop).result(10)
        return self.echo

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self.echo.release_all)  # the server waits for them
        asyncio.run_coroutine_threadsafe(self.echo.__aexit__(None, None, None),
                                         self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def release(self, key: str) -> None:
        """Answer the requests held at ``/held?key=<key>`` (`HttpEcho.release`)."""
        self._loop.call_soon_threadsafe(self.echo.release, key)


def retrying(call: Any, *, what: str, timeout: float = 60.0) -> httpx.Response:
    """``call()`` until it is answered other than 503/507 (an outage says: try again)."""
    end = time.monotonic() + timeout
    while True:
        try:
            r: httpx.Response = call()
        except httpx.TransportError:
            r = httpx.Response(599)
        if r.status_code not in (503, 507, 599):
            return r
        if r.status_code in (503, 507):
            assert r.headers.get("Retry-After"), r.text
            assert r.json().get("reason"), r.text
        assert time.monotonic() < end, f"{what}: still {r.status_code} after {timeout}s"
        time.sleep(0.1)


class Traffic:
    """Submits SEND tasks to alternating nodes and approves whatever waits, until stopped."""

    def __init__(self, nodes: list[DaemonProcess], hook: str) -> None:
        self.nodes = nodes
        self.hook = hook
        self.submitted: list[str] = []
        self.stop = threading.Event()
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._guard, args=(fn,), daemon=True)
                         for fn in (self._submit, self._approve)]

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(120)

    def _guard(self, fn: Any) -> None:
        try:
            fn()
        except BaseException as exc:
            self.errors.append(repr(exc))

    def _submit(self) -> None:
        n = 0
        while not self.stop.is_set():
            node = self.nodes[n % len(self.nodes)]
            steps = [{"tool": "send_webhook", "args": {"url": self.hook, "payload": {"n": n}}}]
            r = retrying(lambda: httpx.post(f"{node.url}/tasks", timeout=30,
                                            json={"goal": f"send {n}", "steps": steps}),
                         what="submit")
            assert r.status_code == 202, r.text
            self.submitted.append(r.json()["id"])
            n += 1
            time.sleep(0.05)

    def _approve(self) -> None:
        k = 0
        while not self.stop.is_set():
            node = self.nodes[k % len(self.nodes)]
            k += 1
            r = retrying(lambda: httpx.get(f"{node.url}/tasks",
                                           params={"state": "waiting_approval"}, timeout=30),
                         what="list")
            for task in r.json()["items"]:
                a = retrying(lambda: httpx.post(
                    f"{node.url}/tasks/{task['id']}/approve",
                    json={"scope": "once"}, timeout=30), what="approve")
                assert a.status_code in (200, 409), a.text
            time.sleep(0.05)


def settled(nodes: list[DaemonProcess], ids: list[str]) -> bool:
    """Every submitted task is completed (approving whatever still waits)."""
    done = True
    for task_id in ids:
        r = retrying(lambda: httpx.get(f"{nodes[0].url}/tasks/{task_id}",
                                       timeout=30), what="read")
        state = r.json()["state"]
        if state == "waiting_approval":
            retrying(lambda: httpx.post(f"{nodes[1].url}/tasks/{task_id}/approve",
                                        json={"scope": "once"}, timeout=30), what="approve")
        done = done and state == "completed"
    return done
