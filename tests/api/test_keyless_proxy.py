"""The keyless loopback mode answers only direct requests from this machine (hole 10).

A reverse proxy on the same machine connects from 127.0.0.1: without these checks it
would make everybody on the internet ``web:local``, able to approve anything.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.helpers import BASE, running_node, serve

PROXY_HEADERS = [{"X-Forwarded-For": "203.0.113.7"}, {"Forwarded": "for=203.0.113.7"},
                 {"X-Real-IP": "203.0.113.7"}, {"X-Forwarded-Host": "signoff.example.com"},
                 {"X-Forwarded-Proto": "https"}]


@pytest.mark.parametrize("header", PROXY_HEADERS, ids=lambda h: next(iter(h)))
async def test_keyless_refuses_requests_that_came_through_a_proxy(
        tmp_path: Path, header: dict[str, str]) -> None:
    """Without a key, a request carrying a proxy header is 403, whatever its address."""
    async with running_node(tmp_path, keys=False) as node, serve(node.app) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as client:
        refused = await client.get("/tasks", headers=header)
        assert refused.status_code == 403
        assert "proxy" in refused.json()["detail"]
        submit = await client.post("/tasks", json={"goal": "g"}, headers=header)
        assert submit.status_code == 403
        assert (await client.get("/tasks")).status_code == 200


async def test_keyless_refuses_the_public_host(tmp_path: Path) -> None:
    """Without a key, a request addressed to daemon.public_url's host is 403 (that is how a
    reverse proxy forwards the internet to us)."""
    async with running_node(tmp_path, keys=False,
                            public_url="https://signoff.example.com") as node, \
            node.client(key=None) as client:
        refused = await client.get("/tasks", headers={"host": "signoff.example.com"})
        assert refused.status_code == 403
        assert "signoff.example.com" in refused.json()["detail"]
        page = await client.get("/", headers={"host": "signoff.example.com",
                                              "accept": "text/html"})
        assert page.status_code == 403


async def test_keyless_refuses_clients_off_loopback(tmp_path: Path) -> None:
    """Without a key, a peer address that is not loopback is 403 even with a loopback Host."""
    async with running_node(tmp_path, keys=False) as node:
        transport = httpx.ASGITransport(app=node.app, client=("192.0.2.10", 40000))
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as remote:
            refused = await remote.get("/tasks")
            assert refused.status_code == 403
            assert "192.0.2.10" in refused.json()["detail"]


async def test_keyless_over_tcp_refuses_forwarded_requests(tmp_path: Path) -> None:
    """Over a real socket from 127.0.0.1, a forwarded request gets 403, a direct one 200."""
    async with running_node(tmp_path, keys=False) as node, serve(node.app) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as http:
        direct = await http.get("/tasks")
        assert direct.status_code == 200
        forwarded = await http.post("/tasks", json={"goal": "g"},
                                    headers={"X-Forwarded-For": "203.0.113.7"})
        assert forwarded.status_code == 403
        assert (await http.get("/tasks")).json()["items"] == []


async def test_a_keyed_daemon_behind_a_proxy_still_answers_its_keys(tmp_path: Path) -> None:
    """With keys, proxy headers change nothing: the key is what authenticates."""
    async with running_node(tmp_path, public_url="https://signoff.example.com") as node, \
            node.client() as client:
        answer = await client.get("/tasks", headers={"X-Forwarded-For": "203.0.113.7",
                                                     "host": "signoff.example.com"})
        assert answer.status_code == 200
