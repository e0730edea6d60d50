"""The console's edit form and time box without a browser: Always with edited args and a
"for" goes through the Always confirmation page unchanged; bad JSON decides nothing."""

from __future__ import annotations

import html
import json
import re

import httpx

from tests.api.helpers import BASE, wait_state
from tests.api.test_web_console import csrf, waiting
from tests.fakes.http_echo import HttpEcho


def hidden(page: str) -> dict[str, str]:
    """The hidden fields of a page's forms (the last value of each name)."""
    return {k: html.unescape(v) for k, v in
            re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page)}


async def test_always_with_edited_args_and_for_survives_the_confirmation(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """The first press asks; the confirmation carries "for" and the args; the edited call
    runs and its always grant lapses after the chosen time."""
    task_id, approval_id = await waiting(client, echo)
    token = csrf((await client.get("/")).text)
    edited = json.dumps({"url": echo.url("/status/200"), "payload": {"n": 7}})
    first = await client.post("/console/decide", data={
        "approval_id": approval_id, "csrf": token, "next": "/", "scope": "always",
        "for": "1h", "args": edited}, headers={"origin": BASE})
    assert first.status_code == 200 and "Approve always?" in first.text
    assert "You edited the arguments" in first.text
    fields = hidden(first.text)
    assert (fields["for"], fields["args"], fields["confirm"]) == ("1h", edited, "always")
    second = await client.post("/console/decide", data={**fields, "scope": "always"},
                               headers={"origin": BASE})
    assert second.status_code == 303
    done = await wait_state(client, task_id, "completed")
    assert done["actions"][0]["args"]["payload"] == {"n": 7}
    [grant] = [g for g in (await client.get("/grants")).json()["items"]
               if g["scope"] == "always"]
    assert grant["expires_at"] is not None


async def test_edited_args_that_are_not_a_json_object_decide_nothing(
        client: httpx.AsyncClient, echo: HttpEcho) -> None:
    """Bad JSON, JSON that is no object, or JSON nested deeper than any intake takes (it
    was a 500 past Python's recursion limit) is a 422 page; the request stays pending."""
    task_id, approval_id = await waiting(client, echo)
    token = csrf((await client.get("/")).text)
    for args in ("{not json", "[1, 2]", '{"a": ' + "[" * 5000 + "]" * 5000 + "}",
                 '{"a": ' + "[" * 40 + "]" * 40 + "}"):
        answer = await client.post("/console/decide", data={
            "approval_id": approval_id, "csrf": token, "next": "/", "scope": "once",
            "args": args}, headers={"origin": BASE})
        assert answer.status_code == 422 and "edited arguments" in answer.text
    assert (await client.get(f"/tasks/{task_id}")).json()["state"] == "waiting_approval"
