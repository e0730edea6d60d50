"""Forwarded headers are believed only from `daemon.trusted_proxies`.

uvicorn's default believes ``X-Forwarded-For`` from 127.0.0.1. Served that way, a local
process could send each wrong console key with a new made-up address, and the sign-in
limit (five failures a minute per address) would never apply: an unlimited guess rate at
the key. These tests run the daemon's own server settings over a real socket.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from signoff.runtime.clock import FakeClock
from tests.api.helpers import KEY, running_node, serve


def forwarded(i: int) -> dict[str, str]:
    return {"X-Forwarded-For": f"203.0.113.{i}"}


async def test_made_up_addresses_do_not_escape_the_sign_in_limit(tmp_path: Path) -> None:
    """By default a wrong key sent with a new X-Forwarded-For each time is still counted
    against the one peer it came from: the sixth try is 429, even with the right key."""
    async with running_node(tmp_path, clock=FakeClock()) as node, \
            serve(node.app, trusted_proxies=()) as url, httpx.AsyncClient(base_url=url) as c:
        for i in range(5):
            wrong = await c.post("/login", data={"key": f"guess-{i}"}, headers=forwarded(i))
            assert wrong.status_code == 401
        limited = await c.post("/login", data={"key": KEY}, headers=forwarded(99))
        assert limited.status_code == 429
        assert "signoff_session" not in limited.headers.get("set-cookie", "")


async def test_a_trusted_proxy_names_its_clients(tmp_path: Path) -> None:
    """With the proxy's address in trusted_proxies, each forwarded client is counted on
    its own: one client's wrong keys hold back that client, not the others behind the
    same proxy."""
    async with running_node(tmp_path, clock=FakeClock()) as node, \
            serve(node.app, trusted_proxies=["127.0.0.0/8"]) as url, \
            httpx.AsyncClient(base_url=url) as c:
        for i in range(5):
            wrong = await c.post("/login", data={"key": f"guess-{i}"}, headers=forwarded(1))
            assert wrong.status_code == 401
        assert (await c.post("/login", data={"key": KEY},
                             headers=forwarded(1))).status_code == 429
        other = await c.post("/login", data={"key": KEY}, headers=forwarded(2))
        assert other.status_code == 303
        assert "signoff_session" in other.headers["set-cookie"]
