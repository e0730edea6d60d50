"""Traffic for real daemons through outages: SEND tasks submitted to alternating nodes and
approved as they come, retried on 503/507 (an outage says: try again), into an HTTP
sink (`HttpEcho`, in a thread of its own) that counts what each approved action sent.
A request that came back to a person because its outcome is unknown (a node frozen or
cut off mid-send) is denied, as a careful person would, when ``deny_unknown`` is set:
each such task is then counted in ``unknown``, and a second send never comes from it.
Used by tests/e2e/test_outages.py and bench/outages.py."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
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

    def __init__(self, nodes: list[DaemonProcess], hook: str, *,
                 deny_unknown: bool = False) -> None:
        self.nodes = nodes
        self.hook = hook
        self.deny_unknown = deny_unknown
        self.submitted: list[str] = []
        self.unknown: set[str] = set()  # tasks denied after an "outcome unknown"
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
            answer_waiting(node, self)
            time.sleep(0.05)


def answer_waiting(node: DaemonProcess, traffic: Traffic | None) -> None:
    """Approve every request of a task waiting on ``node`` (deny those whose outcome is
    unknown, when ``traffic.deny_unknown``)."""
    r = retrying(lambda: httpx.get(f"{node.url}/approvals", params={"limit": 200},
                                   timeout=30), what="list")
    for item in r.json()["items"]:
        task_id = item["task_id"]
        if task_id is None:
            continue
        deny = traffic is not None and traffic.deny_unknown \
            and "outcome unknown" in (item["note"] or "")
        verb, body = ("deny", {}) if deny else ("approve", {"scope": "once"})
        a = retrying(lambda: httpx.post(f"{node.url}/tasks/{task_id}/{verb}", json=body,
                                        timeout=30), what=verb)
        assert a.status_code in (200, 409), a.text
        if deny and a.status_code == 200 and traffic is not None:
            traffic.unknown.add(task_id)


def settled(nodes: list[DaemonProcess], ids: list[str], traffic: Traffic | None = None
            ) -> bool:
    """Every submitted task has ended: completed, or denied after an unknown outcome
    (answering whatever still waits, as the traffic would)."""
    answer_waiting(nodes[-1], traffic)
    done = True
    for task_id in ids:
        r = retrying(lambda: httpx.get(f"{nodes[0].url}/tasks/{task_id}",
                                       timeout=30), what="read")
        state = r.json()["state"]
        ended = state == "completed" or (
            state == "failed" and traffic is not None and task_id in traffic.unknown)
        done = done and ended
    return done


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the file to delete."""
    filler = directory / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler
