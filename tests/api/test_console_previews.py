"""The console's card: what the action will do (a diff), masked URLs, what each answer
means, and a confirmation step for Always that needs no JavaScript."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from signoff.runtime.text import MASK
from tests.api.helpers import Running, make_settings, running_node, wait_state, webhook_steps
from tests.fakes.http_echo import HttpEcho


def csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match
    return match.group(1)


async def waiting(client: httpx.AsyncClient, steps: list[dict[str, object]]) -> dict[str, str]:
    response = await client.post("/tasks", json={"goal": "preview me", "steps": steps})
    task = await wait_state(client, response.json()["id"], "waiting_approval")
    return {"task": task["id"], "approval": task["approval"]["id"]}


async def test_card_shows_the_diff_escaped_and_drops_it_once_decided(tmp_path: Path) -> None:
    """A write_file card diffs the file as it is when the page is built; markup in the file
    is text; after the write the decided card no longer claims a diff."""
    settings = make_settings(tmp_path, approvals={"autonomous_risks": ["READ"]})
    (tmp_path / "page.html").write_text("<p>old</p>\n")
    async with running_node(tmp_path, settings=settings) as node, node.client() as client:
        ids = await waiting(client, [{"tool": "write_file", "args": {
            "path": "page.html", "content": "<p>new</p>\n"}}])
        html = (await client.get("/")).text
        assert '<section class="preview preview-diff"' in html
        assert "<h3>Changes to page.html</h3>" in html
        assert '<span class="d-del">-&lt;p&gt;old&lt;/p&gt;</span>' in html
        assert '<span class="d-add">+&lt;p&gt;new&lt;/p&gt;</span>' in html
        assert "<p>new</p>" not in html
        # Built again, the preview follows the file as it is now.
        (tmp_path / "page.html").write_text("<p>newer</p>\n")
        card = (await client.get(f"/console/cards/{ids['approval']}")).text
        assert "-&lt;p&gt;newer&lt;/p&gt;" in card
        page = (await client.get("/")).text
        await client.post("/console/decide", data={"approval_id": ids["approval"],
                                                   "scope": "once", "csrf": csrf(page)})
        await wait_state(client, ids["task"], "completed")
        decided = (await client.get(f"/console/tasks/{ids['task']}")).text
        assert "Approved once by web:admin" in decided and 'class="preview' not in decided


async def test_console_masks_urls_on_cards(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """The card's title and targets show the token as •••, the page never the token."""
    url = echo.url("/hook?token=abc123secret")
    await waiting(client, webhook_steps(url))
    html = (await client.get("/")).text
    assert echo.url(f"/hook?token={MASK}") in html and "abc123secret" not in html


async def test_card_explains_each_answer(client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Once, Session and Always are explained on the card, for the answers it offers."""
    await waiting(client, webhook_steps(echo.url("/hook")))
    html = (await client.get("/")).text
    help_ = re.search(r'<ul class="scope-help".*?</ul>', html)
    assert help_ is not None
    text = re.sub(r"<[^>]+>", "", help_.group(0))
    assert "Once: this exact action, now, this one time." in text
    assert "Session: this exact action now and again without asking, for the rest of " \
           "this task." in text
    assert "Always: this exact action from now on, for this task, until revoked." in text


async def test_always_asks_for_confirmation_before_it_decides(
        node: Running, client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A first Always press decides nothing and shows a confirmation form; its Yes decides
    (always); Cancel leads back. Plain forms: no JavaScript is involved."""
    ids = await waiting(client, webhook_steps(echo.url("/hook")))
    token = csrf((await client.get("/")).text)
    first = await client.post("/console/decide", data={
        "approval_id": ids["approval"], "scope": "always", "csrf": token, "next": "/"})
    assert first.status_code == 200
    assert "<h1>Approve always?</h1>" in first.text
    assert "from now on" in first.text and "POST a webhook to" in first.text
    assert '<input type="hidden" name="confirm" value="always">' in first.text
    assert '<a class="btn btn-cancel" href="/">Cancel</a>' in first.text
    assert (await client.get(f"/tasks/{ids['task']}")).json()["state"] == "waiting_approval"
    assert (await client.get("/grants")).json()["items"] == []

    confirmed = await client.post("/console/decide", data={
        "approval_id": ids["approval"], "scope": "always", "confirm": "always",
        "csrf": csrf(first.text), "next": "/"})
    assert confirmed.status_code == 303
    done = await wait_state(client, ids["task"], "completed")
    assert done["actions"][0]["decision"].endswith("always")
    grants = (await client.get("/grants")).json()["items"]
    assert [g["scope"] for g in grants] == ["always"]


async def test_always_on_a_decided_request_is_refused_without_a_question(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Nothing to confirm once decided: the press goes through and is refused as late."""
    ids = await waiting(client, webhook_steps(echo.url("/hook")))
    token = csrf((await client.get("/")).text)
    await client.post(f"/tasks/{ids['task']}/deny", json={"reason": "no"})
    late = await client.post("/console/decide", data={
        "approval_id": ids["approval"], "scope": "always", "csrf": token, "next": "/"})
    assert late.status_code == 303
    after = (await client.get("/")).text
    assert "Already decided" in after


async def test_a_card_cut_for_chat_shows_everything_it_approves_in_the_console(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """A payload longer than a card carries: the console card (where chat cards send
    people) shows all of it, its tail included."""
    payload = {"text": "x" * 1500 + " THE-END"}
    await waiting(client, webhook_steps(echo.url("/hook"), payload))
    html = (await client.get("/")).text
    assert '<details class="whole" open>' in html and "THE-END" in html
