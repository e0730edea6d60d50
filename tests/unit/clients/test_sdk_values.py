"""What the SDK sends for a Python call: JSON-safe arguments and readable tool names."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from signoff_client import NotApproved, Signoff
from signoff_client.sdk import jsonable, tool_name


def test_arguments_become_json_a_person_can_read() -> None:
    """Datetimes, UUIDs, paths, decimals, sets and bytes are shown as values, not reprs."""
    when = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    ident = uuid.UUID(int=7)
    value = jsonable({"when": when, "day": when.date(), "id": ident, "path": Path("/tmp/x"),
                      "amount": decimal.Decimal("1.50"), "tags": {"b", "a"}, "raw": b"hi",
                      "nested": [(1, 2)]})
    assert value == {"when": "2030-01-02T03:04:05+00:00", "day": "2030-01-02",
                     "id": str(ident), "path": "/tmp/x", "amount": "1.50",
                     "tags": ["a", "b"], "raw": "hi", "nested": [[1, 2]]}
    json.dumps(value)


def test_a_structure_that_contains_itself_is_cut_not_recursed_forever() -> None:
    """A self-referencing list still gives JSON (cut at the daemon's depth limit)."""
    loop: list[Any] = []
    loop.append(loop)
    json.dumps(jsonable(loop))


def test_a_nested_function_has_a_readable_tool_name() -> None:
    """No ``<locals>`` in the tool name of a function defined inside another."""
    def send() -> None: ...
    assert tool_name(send) == (f"{__name__}.test_a_nested_function_has_a_readable_tool_name"
                               ".send")


async def test_gate_keeps_the_coroutine_type() -> None:
    """A gated coroutine function still returns a coroutine (asyncio.create_task takes it)."""
    s = Signoff("http://127.0.0.1:9", retries=0)

    @s.gate(risk="SEND")
    async def send(to: str) -> str:
        return to

    task = asyncio.create_task(send("x"))
    with pytest.raises(NotApproved, match="unreachable"):  # no daemon there: fail closed
        await task
    await s.aclose()


def _answering(body: dict[str, Any]) -> Any:
    """A transport that answers every call with ``body`` (a daemon's JSON, as sent)."""
    import httpx

    return httpx.MockTransport(lambda request: httpx.Response(200, json=body))


async def test_an_edited_approval_carries_the_args_to_run() -> None:
    """"edited": true with args: approved, and the args to run instead are on the Decision."""
    body = {"id": "a-1", "status": "approved", "edited": True, "args": {"to": "b"}}
    async with Signoff("http://signoff.test", transport=_answering(body)) as s:
        d = await s.request("send", {"to": "a"}, editable=True)
    assert d.approved and d.edited and d.args == {"to": "b"}
    assert "with edited args" in d.describe()


async def test_an_edited_approval_without_args_is_not_an_approval() -> None:
    """"edited": true but no args: an error, never a fall back to the asked args."""
    body = {"id": "a-1", "status": "approved", "edited": True}
    async with Signoff("http://signoff.test", transport=_answering(body)) as s:
        d = await s.request("send", {"to": "a"}, editable=True)
    assert not d.approved and d.status == "error" and d.args is None
