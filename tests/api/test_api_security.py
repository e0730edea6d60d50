"""Security of the API and console: keys, cookies, CSRF, origins, body size, rebinding."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.net import is_loopback
from signoff.wiring import api_context, api_keys
from tests.api.helpers import (
    BASE,
    KEY,
    Running,
    make_settings,
    running_node,
    serve,
    wait_state,
    webhook_steps,
)
from tests.fakes.http_echo import HttpEcho

# The public signing keys are public: a receipt's holder checks it against them.
OPEN = {("GET", "/health"), ("POST", "/login"), ("GET", "/.well-known/signoff-keys")}


def _flatten(routes: list[Any]) -> list[Any]:
    """Routes, looking inside included routers."""
    out = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        out.extend(_flatten(list(inner.routes)) if inner is not None else [route])
    return out


def every_route(node: Running) -> list[tuple[str, str]]:
    """(method, path) of every route of the app, path parameters filled in."""
    found = []
    for route in _flatten(list(node.app.routes)):
        methods = getattr(route, "methods", None)
        if not methods:
            continue
        path = re.sub(r"\{[^}]+\}", "x", str(getattr(route, "path", "")))
        for method in sorted(methods):
            if method != "HEAD":
                found.append((method, path))
    return found


async def login(client: httpx.AsyncClient, key: str = KEY) -> str:
    """Sign the console in with ``?key=``; return the session cookie."""
    response = await client.get("/", params={"key": key})
    assert response.status_code == 303
    return str(client.cookies["signoff_session"])


async def csrf_of(client: httpx.AsyncClient) -> str:
    page = await client.get("/")
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert match, page.text
    return match.group(1)


async def waiting_task(client: httpx.AsyncClient, echo: HttpEcho) -> tuple[str, str]:
    response = await client.post("/tasks", json={"goal": "g",
                                                 "steps": webhook_steps(echo.url("/hook"))})
    task = await wait_state(client, response.json()["id"], "waiting_approval")
    return task["id"], task["approval"]["id"]


@pytest.fixture
async def anonymous(node: Running) -> AsyncIterator[httpx.AsyncClient]:
    async with node.client(key=None) as c:
        yield c


async def test_every_route_but_health_needs_a_key(node: Running,
                                                  anonymous: httpx.AsyncClient) -> None:
    """Without a key every route answers 401 (JSON), except /health, the public signing
    keys and the login form."""
    routes = every_route(node)
    assert len(routes) > 20
    for method, path in routes:
        if path.startswith("/static/") or (method, path) in OPEN:
            continue
        response = await anonymous.request(method, path, json={} if method != "GET" else None)
        assert response.status_code == 401, (method, path, response.status_code)
        assert response.headers["www-authenticate"] == "Bearer"
        assert "detail" in response.json()
    assert (await anonymous.get("/health")).status_code == 200
    assert (await anonymous.get("/no/such/route")).status_code == 401


@pytest.mark.parametrize("header", ["Bearer wrong-key", "Bearer", f"Basic {KEY}",
                                    f"Bearer {KEY}x", f"Bearer {KEY[:-1]}"])
async def test_wrong_keys_are_401(node: Running, anonymous: httpx.AsyncClient,
                                  header: str) -> None:
    """A wrong, truncated, extended or non-bearer key is refused."""
    response = await anonymous.get("/tasks", headers={"Authorization": header})
    assert response.status_code == 401


async def test_bearer_scheme_is_case_insensitive(anonymous: httpx.AsyncClient) -> None:
    """`bearer <key>` works like `Bearer <key>`."""
    response = await anonymous.get("/tasks", headers={"Authorization": f"bearer {KEY}"})
    assert response.status_code == 200


async def test_browser_without_a_session_gets_the_login_form(
        anonymous: httpx.AsyncClient) -> None:
    """A browser opening the console without a session sees the sign-in form (401)."""
    response = await anonymous.get("/", headers={"accept": "text/html"})
    assert response.status_code == 401
    assert '<form method="post" action="/login">' in response.text
    assert 'type="password"' in response.text


async def test_query_key_sets_a_strict_httponly_cookie(anonymous: httpx.AsyncClient) -> None:
    """GET /?key=<key> sets an HttpOnly, SameSite=Strict cookie (not the key) and redirects."""
    response = await anonymous.get("/", params={"key": KEY})
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    assert "signoff_session=" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert KEY not in cookie
    page = await anonymous.get("/")
    assert page.status_code == 200
    assert "web:admin" in page.text


async def test_wrong_query_key_gets_the_login_form(anonymous: httpx.AsyncClient) -> None:
    """GET /?key=<wrong> sets no cookie and shows the form with an error."""
    response = await anonymous.get("/", params={"key": "nope"}, headers={"accept": "text/html"})
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert "not valid" in response.text


async def test_login_form_signs_in(anonymous: httpx.AsyncClient) -> None:
    """POST /login with the key sets the cookie and goes back to the page asked for."""
    response = await anonymous.post("/login", data={"key": KEY, "next": "/console/tasks/t-1"})
    assert response.status_code == 303
    assert response.headers["location"] == "/console/tasks/t-1"
    assert "HttpOnly" in response.headers["set-cookie"]
    bad = await anonymous.post("/login", data={"key": "nope", "next": "https://evil.example/"})
    assert bad.status_code == 401
    assert 'value="/"' in bad.text  # the foreign "next" was dropped


async def test_logout_clears_the_cookie(anonymous: httpx.AsyncClient) -> None:
    """POST /logout (with the CSRF token) ends the session."""
    await login(anonymous)
    token = await csrf_of(anonymous)
    response = await anonymous.post("/logout", data={"csrf": token})
    assert response.status_code == 303
    assert (await anonymous.get("/tasks")).status_code == 401


async def test_foreign_origin_cannot_decide(node: Running, client: httpx.AsyncClient,
                                            anonymous: httpx.AsyncClient,
                                            echo: HttpEcho) -> None:
    """A console decision or API approval posted from another site is refused with 403."""
    task_id, approval_id = await waiting_task(client, echo)
    await login(anonymous)
    token = await csrf_of(anonymous)
    form = {"approval_id": approval_id, "scope": "once", "csrf": token}
    for headers in ({"origin": "https://evil.example"},
                    {"referer": "https://evil.example/page"},
                    {"origin": "null"},
                    {"sec-fetch-site": "cross-site"}):
        response = await anonymous.post("/console/decide", data=form, headers=headers)
        assert response.status_code == 403, headers
        api = await anonymous.post(f"/tasks/{task_id}/approve", json={}, headers=headers)
        assert api.status_code == 403
    bearer = await client.post(f"/tasks/{task_id}/approve", json={},
                               headers={"origin": "https://evil.example"})
    assert bearer.status_code == 403
    assert (await client.get(f"/tasks/{task_id}")).json()["state"] == "waiting_approval"
    same = await anonymous.post("/console/decide", data=form, headers={"origin": BASE})
    assert same.status_code == 303


async def test_console_decisions_need_the_csrf_token(client: httpx.AsyncClient,
                                                     anonymous: httpx.AsyncClient,
                                                     echo: HttpEcho) -> None:
    """A same-origin form post without this session's CSRF token is refused."""
    task_id, approval_id = await waiting_task(client, echo)
    await login(anonymous)
    for token in (None, "", "0" * 40):
        form = {"approval_id": approval_id, "scope": "once"}
        if token is not None:
            form["csrf"] = token
        response = await anonymous.post("/console/decide", data=form)
        assert response.status_code == 403
    assert (await client.get(f"/tasks/{task_id}")).json()["state"] == "waiting_approval"


async def test_cookie_api_calls_need_the_csrf_header(client: httpx.AsyncClient,
                                                     anonymous: httpx.AsyncClient,
                                                     echo: HttpEcho) -> None:
    """A state-changing API call riding the console cookie needs X-CSRF-Token."""
    task_id, _ = await waiting_task(client, echo)
    await login(anonymous)
    assert (await anonymous.get("/tasks")).status_code == 200
    refused = await anonymous.post(f"/tasks/{task_id}/deny", json={})
    assert refused.status_code == 403
    token = await csrf_of(anonymous)
    allowed = await anonymous.post(f"/tasks/{task_id}/deny", json={},
                                   headers={"x-csrf-token": token})
    assert allowed.status_code == 200


async def test_oversized_bodies_are_413(client: httpx.AsyncClient) -> None:
    """Bodies over 1 MiB get 413, by Content-Length and when streamed without one."""
    big = b'{"goal": "' + b"x" * (1024 * 1024) + b'"}'
    response = await client.post("/tasks", content=big,
                                 headers={"content-type": "application/json"})
    assert response.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"goal": "'
        for _ in range(17):
            yield b"x" * 65536
        yield b'"}'

    streamed = await client.post("/tasks", content=chunks(),
                                 headers={"content-type": "application/json"})
    assert "content-length" not in streamed.request.headers
    assert streamed.status_code == 413
    fits = await client.post("/tasks", json={"goal": "x" * 9_000})
    assert fits.status_code == 202


async def test_console_pages_forbid_framing_and_inline_script(client: httpx.AsyncClient) -> None:
    """Console pages carry a strict Content-Security-Policy and refuse to be framed."""
    page = await client.get("/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert "<script>" not in page.text


async def test_keyless_loopback_callers_are_web_local(tmp_path: Path, echo: HttpEcho) -> None:
    """With no key on a loopback host, callers act as web:local."""
    async with running_node(tmp_path, keys=False) as node, serve(node.app) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as client:
        assert node.ctx.local_no_key
        task_id, _ = await waiting_task(client, echo)
        approved = await client.post(f"/tasks/{task_id}/approve", json={})
        assert approved.status_code == 200
        done = await wait_state(client, task_id, "completed")
        assert done["actions"][0]["decided_by"] == "web:local"
        page = await client.get("/")
        assert page.status_code == 200 and "web:local" in page.text


async def test_keyless_mode_refuses_other_hosts(tmp_path: Path) -> None:
    """Without a key, a request addressed to another host name (DNS rebinding) is 403."""
    async with running_node(tmp_path, keys=False) as node, serve(node.app) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as client:
        rebound = await client.get("/tasks", headers={"host": "evil.example:8080"})
        assert rebound.status_code == 403
        assert (await client.get("/tasks", headers={"host": "localhost:8080"})).status_code == 200


async def test_keyless_off_loopback_answers_nothing(tmp_path: Path) -> None:
    """A context for 0.0.0.0 without a key is not keyless: every route but /health is 401."""
    settings = make_settings(tmp_path, keys=False, host="0.0.0.0")
    async with running_node(tmp_path, settings=settings) as node, \
            node.client(key=None) as client:
        assert not node.ctx.local_no_key
        response = await client.get("/tasks")
        assert response.status_code == 401
        assert "api.key" in response.json()["detail"]
        assert (await client.get("/health")).status_code == 200


def test_keys_and_loopback_rules() -> None:
    """api.key acts as admin, named keys by name; only loopback hosts may run keyless."""
    settings = make_settings(Path("/tmp"))
    assert api_keys(settings) == {KEY: "admin",
                                                "bob-key-0123456789abcdef": "bob"}
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.2", "example.com", "::"))
    assert api_context.__doc__


async def test_chat_card_link_leads_through_login_to_the_task_page(
        client: httpx.AsyncClient, anonymous: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A browser opening a card's /tasks/{id} link signs in and lands on the task page."""
    task_id, _ = await waiting_task(client, echo)
    html = {"accept": "text/html"}
    first = await anonymous.get(f"/tasks/{task_id}", headers=html)
    assert first.status_code == 401
    assert f'name="next" value="/tasks/{task_id}"' in first.text
    signed = await anonymous.post("/login", data={"key": KEY, "next": f"/tasks/{task_id}"})
    assert signed.headers["location"] == f"/tasks/{task_id}"
    redirected = await anonymous.get(f"/tasks/{task_id}", headers=html)
    assert redirected.headers["location"] == f"/console/tasks/{task_id}"
    page = await anonymous.get(f"/console/tasks/{task_id}", headers=html)
    assert page.status_code == 200 and task_id in page.text
    other = await anonymous.get("/", params={"monkey": "1"})
    assert other.status_code == 200, "only a `key` parameter signs in"
