"""The web console over HTTP: cards, form decisions through the flow, task pages, escaping."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from signoff.adapters.web.pages import time_left
from signoff.runtime.models import Scope
from tests.api.helpers import (
    BASE,
    BOB_KEY,
    Running,
    make_settings,
    running_node,
    wait_state,
    webhook_steps,
)
from tests.fakes.http_echo import HttpEcho


async def waiting(client: httpx.AsyncClient, echo: HttpEcho, goal: str = "ping the hook"
                  ) -> tuple[str, str]:
    response = await client.post("/tasks", json={"goal": goal,
                                                 "steps": webhook_steps(echo.url("/hook"))})
    task = await wait_state(client, response.json()["id"], "waiting_approval")
    return task["id"], task["approval"]["id"]


def buttons(html: str) -> list[str]:
    """The decision buttons of the cards (not the edit form's, nor sign-out)."""
    forms = re.findall(r'<form class="decide".*?</form>', html)
    return [b for f in forms for b in re.findall(r"<button[^>]*>([^<]+)</button>", f)]


def csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match
    return match.group(1)


async def test_pending_card_shows_action_targets_context_and_buttons(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """The console lists a pending request with its tool, target, risk, who asked and buttons."""
    task_id, approval_id = await waiting(client, echo)
    page = await client.get("/")
    assert page.status_code == 200
    html = page.text
    assert f'data-approval="{approval_id}"' in html
    assert "POST a webhook to" in html and echo.url("/hook") in html
    assert ">SEND<" in html and "send_webhook" in html
    assert "web:admin" in html and task_id in html
    assert "expires in 29 min" in html or "expires in 30 min" in html
    assert buttons(html) == ["Once", "Session", "Always", "Deny"]
    assert '<form class="decide" method="post" action="/console/decide">' in html
    assert '<div id="live" data-src="/console/fragment/approvals"' in html


async def test_only_the_allowed_scopes_get_buttons(tmp_path: Path, echo: HttpEcho) -> None:
    """A risk class configured with once/deny shows exactly those two buttons."""
    settings = make_settings(tmp_path, approvals={"scopes": {"SEND": ["once", "deny"]}})
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        await waiting(client, echo)
        assert buttons((await client.get("/")).text) == ["Once", "Deny"]


async def test_console_form_decides_through_the_flow(node: Running, client: httpx.AsyncClient,
                                                     echo: HttpEcho) -> None:
    """Pressing Session posts the form, redirects back with a notice, and the task runs."""
    task_id, approval_id = await waiting(client, echo)
    page = (await client.get("/")).text
    response = await client.post("/console/decide", data={
        "approval_id": approval_id, "scope": "session", "csrf": csrf(page), "next": "/"},
        headers={"origin": BASE})
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    done = await wait_state(client, task_id, "completed")
    assert done["actions"][0]["decided_by"] == "web:admin"
    assert done["actions"][0]["decision"] == "approved:session"
    after = await client.get("/")
    assert "Approved for this session" in after.text
    assert 'class="flash done"' in after.text  # an answer taken: the "done" look
    assert "Recently decided" in after.text and "Task completed" in after.text
    assert "Approved for this session" in node.web.feedback[-1]
    assert len([r for r in echo.requests if r.path == "/hook"]) == 1
    card = node.web.card(approval_id)
    assert card is not None and card.status == "approved" and not card.open


async def test_deny_from_the_console_keeps_the_reason(client: httpx.AsyncClient,
                                                      echo: HttpEcho) -> None:
    """Deny with a reason from the console fails the task with that reason."""
    task_id, approval_id = await waiting(client, echo)
    page = (await client.get("/")).text
    await client.post("/console/decide", data={"approval_id": approval_id, "scope": "deny",
                                               "reason": "wrong hook", "csrf": csrf(page)})
    task = await wait_state(client, task_id, "failed")
    assert task["result"]["reason"] == "user denied: wrong hook"


async def test_late_click_is_answered_with_who_decided(client: httpx.AsyncClient,
                                                       echo: HttpEcho) -> None:
    """A click on a card decided elsewhere is refused with a notice naming the decider."""
    task_id, approval_id = await waiting(client, echo)
    page = (await client.get("/")).text
    assert (await client.post(f"/tasks/{task_id}/deny", json={})).status_code == 200
    await client.post("/console/decide", data={"approval_id": approval_id, "scope": "once",
                                               "csrf": csrf(page)})
    after = (await client.get("/")).text
    assert "Already decided by web:admin" in after


async def test_page_follows_the_store_when_another_node_decides(
        node: Running, client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A decision applied straight to the store (as another node would) shows on the page."""
    _, approval_id = await waiting(client, echo)
    result = await node.node.decider.decide(approval_id, Scope.DENY, "slack:U42", reason="no")
    assert result.accepted
    html = (await client.get("/console/fragment/approvals")).text
    assert "Nothing is waiting for a decision." in html
    assert "Denied by slack:U42" in html


async def test_task_page_shows_history_and_audit(client: httpx.AsyncClient,
                                                 echo: HttpEcho) -> None:
    """/console/tasks/{id} shows the state, the action history and the audit events."""
    task_id, _ = await waiting(client, echo)
    await client.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
    await wait_state(client, task_id, "completed")
    page = await client.get(f"/console/tasks/{task_id}")
    assert page.status_code == 200
    html = page.text
    assert 'class="state state-completed"' in html
    assert 'class="history"' in html and "approved:once by web:admin" in html
    assert 'class="audit"' in html and "evaluation" in html and "decision" in html
    assert f'data-src="/console/fragment/tasks/{task_id}"' in html
    fragment = await client.get(f"/console/fragment/tasks/{task_id}")
    assert "Audit events" in fragment.text and "<html" not in fragment.text
    missing = await client.get("/console/tasks/t-missing")
    assert missing.status_code == 404 and "No task t-missing" in missing.text


async def test_everything_from_a_task_is_escaped(client: httpx.AsyncClient,
                                                 echo: HttpEcho) -> None:
    """A goal full of HTML is shown as text, never as markup."""
    evil = '<script>alert(1)</script><img src=x onerror="boom">'
    task_id, _ = await waiting(client, echo, goal=evil)
    for path in ("/", f"/console/tasks/{task_id}"):
        html = (await client.get(path)).text
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def test_static_assets_are_served_without_a_key(node: Running) -> None:
    """The console's script and stylesheet load without a key; nothing else is there."""
    async with node.client(key=None) as anonymous:
        script = await anonymous.get("/static/console.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert "EventSource" in script.text
        assert (await anonymous.get("/static/console.css")).status_code == 200
        assert (await anonymous.get("/static/../app.py")).status_code in (401, 404)
        assert (await anonymous.get("/static/secret.txt")).status_code == 404


async def test_single_card_fragment(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """/console/cards/{approval_id} renders one card from the store."""
    _, approval_id = await waiting(client, echo)
    card = await client.get(f"/console/cards/{approval_id}")
    assert card.status_code == 200 and f'id="card-{approval_id}"' in card.text
    assert (await client.get("/console/cards/a-none")).status_code == 404


def test_time_left_words() -> None:
    """Time left before expiry reads naturally."""
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert time_left(now + timedelta(seconds=30), now) == "expires in 30 s"
    assert time_left(now + timedelta(minutes=29, seconds=59), now) == "expires in 29 min"
    assert time_left(now + timedelta(hours=2), now) == "expires in 2 h"
    assert time_left(now + timedelta(hours=1, minutes=5), now) == "expires in 1 h 5 min"
    assert time_left(now - timedelta(seconds=1), now) == "expired"


async def test_the_card_names_the_person_who_asked(tmp_path: Path, echo: HttpEcho) -> None:
    """With [[people]] listing the admin key as Dana, the console card says she asked."""
    settings = make_settings(tmp_path, people=[{"name": "Dana", "accounts": ["web:admin"]}])
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        await waiting(client, echo)
        html = (await client.get("/")).text
        assert re.search(r"Asked by.{0,80}Dana", html, re.S), html


async def test_task_page_names_people_and_the_audit_keeps_the_key(tmp_path: Path,
                                                                  echo: HttpEcho) -> None:
    """With `[[people]]` naming web:bob "Bob" and web:admin "Ada", the task page's
    "Submitted by" and history say Ada and Bob, while its audit events keep the keys."""
    settings = make_settings(tmp_path, people=[{"name": "Bob", "accounts": ["web:bob"]},
                                               {"name": "Ada", "accounts": ["web:admin"]}])
    async with running_node(tmp_path, settings=settings) as node, \
            node.client(BOB_KEY) as bob, node.client() as admin:
        task_id, _ = await waiting(admin, echo)
        assert (await bob.post(f"/tasks/{task_id}/deny", json={})).status_code == 200
        await wait_state(admin, task_id, "failed")
        html = (await admin.get(f"/console/tasks/{task_id}")).text
    assert "<dt>Submitted by</dt><dd>Ada</dd>" in html, html
    history, audit = html.split('class="history"', 1)[1].split('class="audit"', 1)
    assert "denied by Bob" in history and "web:bob" not in history, history
    assert "web:bob" in audit
