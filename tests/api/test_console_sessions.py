"""Console sessions end for real: signing out kills every copy of the cookie, a session
expires by the node's Clock, and failed sign-ins are rate limited per address."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import httpx

from signoff.runtime.clock import FakeClock
from tests.api.helpers import BASE, KEY, Running, make_settings, running_node


def browser(node: Running, address: str = "127.0.0.1") -> httpx.AsyncClient:
    """A client without a key, at ``address``."""
    transport = httpx.ASGITransport(app=node.app, client=(address, 50000))
    return httpx.AsyncClient(transport=transport, base_url=BASE)


async def sign_in(client: httpx.AsyncClient) -> str:
    answer = await client.post("/login", data={"key": KEY, "next": "/"})
    assert answer.status_code == 303, answer.text
    return str(client.cookies["signoff_session"])


async def test_logout_ends_the_session_server_side(node: Running) -> None:
    """After signing out, a copy of the cookie taken before is refused (401)."""
    async with browser(node) as person, browser(node) as thief:
        cookie = await sign_in(person)
        assert cookie != KEY and KEY not in cookie
        thief.cookies.set("signoff_session", cookie)
        assert (await thief.get("/tasks")).status_code == 200
        page = await person.get("/")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        out = await person.post("/logout", data={"csrf": csrf.group(1)})
        assert out.status_code == 303
        assert (await thief.get("/tasks")).status_code == 401
        thief.cookies.set("signoff_session", cookie)
        assert (await thief.get("/", headers={"accept": "text/html"})).status_code == 401


async def test_a_session_expires_after_its_ttl(tmp_path: Path) -> None:
    """A console sign-in lasts api.session_ttl by the node's Clock, then is refused."""
    clock = FakeClock()
    settings = make_settings(tmp_path, api={"key": KEY, "session_ttl": "2h"})
    async with running_node(tmp_path, settings=settings, clock=clock) as node, \
            browser(node) as person:
        answer = await person.post("/login", data={"key": KEY, "next": "/"})
        assert "Max-Age=7200" in answer.headers["set-cookie"]
        clock.advance(timedelta(hours=2) - timedelta(seconds=1))
        assert (await person.get("/tasks")).status_code == 200
        clock.advance(timedelta(seconds=1))
        assert (await person.get("/tasks")).status_code == 401


async def test_failed_sign_ins_are_rate_limited_per_address(tmp_path: Path) -> None:
    """Five wrong keys in a minute from one address: the next sign-in is 429 with
    Retry-After, even with the right key; another address and a minute later are fine."""
    clock = FakeClock()
    async with running_node(tmp_path, clock=clock) as node, \
            browser(node, "192.0.2.1") as guesser, browser(node, "192.0.2.2") as person:
        for i in range(5):
            wrong = await guesser.post("/login", data={"key": f"guess-{i}"})
            assert wrong.status_code == 401
        limited = await guesser.post("/login", data={"key": KEY})
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "60"
        assert "signoff_session" not in guesser.cookies
        by_query = await guesser.get("/", params={"key": KEY})
        assert by_query.status_code == 429
        assert (await person.post("/login", data={"key": KEY})).status_code == 303
        clock.advance(timedelta(seconds=60))
        assert (await guesser.post("/login", data={"key": KEY})).status_code == 303


async def test_a_changed_key_ends_its_sessions(tmp_path: Path) -> None:
    """A session opened with a key that is no longer configured is refused."""
    async with running_node(tmp_path) as node, browser(node) as person:
        cookie = await sign_in(person)
    settings = make_settings(tmp_path, api={"key": KEY + "-rotated"})
    async with running_node(tmp_path, settings=settings) as node, browser(node) as person:
        person.cookies.set("signoff_session", cookie)
        assert (await person.get("/tasks")).status_code == 401
