"""The Python SDK (signoff.client) against a daemon app on a real uvicorn server."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response

from signoff.client import NotApproved, Signoff, SignoffSync
from signoff.runtime.clock import FakeClock
from tests.api.helpers import BOB_KEY, Running, eventually, running_node, serve

AGENT_KEY = BOB_KEY  # the agent asks with its key; a person (the admin) decides


@pytest.fixture
async def base(node: Running) -> AsyncIterator[str]:
    async with serve(node.app) as url:
        yield url


async def pending_ids(node: Running) -> list[str]:
    async with node.client() as client:
        return [i["id"] for i in (await client.get("/approvals")).json()["items"]]


async def decide_first(node: Running, verb: str, body: dict[str, Any] | None = None) -> str:
    """Wait for a pending request and decide it as a person would."""
    found: list[str] = []

    async def some() -> bool:
        found[:] = await pending_ids(node)
        return bool(found)

    await eventually(some, what="a pending request")
    async with node.client() as client:
        answer = await client.post(f"/approvals/{found[0]}/{verb}", json=body or {})
        assert answer.status_code == 200, answer.text
    return found[0]


async def outcomes(node: Running, approval_id: str) -> list[tuple[str, str | None]]:
    async with node.client() as client:
        events = (await client.get("/audit", params={"limit": 500})).json()["items"]
    return [(e["decision"], e["reason"]) for e in events
            if e["approval_id"] == approval_id and e["kind"] == "outcome"]


class FlakyTransport(httpx.AsyncBaseTransport):
    """Real HTTP, but the first ``failures`` calls fail as a dropped connection would:
    before sending (``after=False``) or after the daemon got the request (``after=True``)."""

    def __init__(self, failures: int, *, after: bool = False) -> None:
        self.failures = failures
        self.after = after
        self.calls = 0
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.failures and not self.after:
            raise httpx.ConnectError("connection refused", request=request)
        response = await self.inner.handle_async_request(request)
        if self.calls <= self.failures:
            await response.aread()
            raise httpx.ReadError("connection reset", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_read_action_is_approved_at_once(base: str) -> None:
    """READ is settled by the policy: approved, decision ALLOW, no waiting."""
    async with Signoff(base, api_key=AGENT_KEY) as s:
        d = await s.request(tool="read_file", args={"path": "notes.txt"}, policy_id="p-1")
    assert d.approved and d.decision == "ALLOW" and d.id


async def test_request_waits_for_a_person(node: Running, base: str) -> None:
    """A SEND request long-polls until someone approves it; the answer says who and how."""
    async with Signoff(base, api_key=AGENT_KEY, requester="script:report") as s:
        asking = asyncio.create_task(s.request(
            tool="send_email", args={"to": "john@example.com", "subject": "hi", "body": "b"},
            policy_id="run-1", why="weekly report"))
        approval_id = await decide_first(node, "approve", {"scope": "session"})
        d = await asking
    assert d.approved and d.id == approval_id
    assert d.scope == "session" and d.decided_by == "web:admin"


async def test_a_denial_is_not_approved(node: Running, base: str) -> None:
    """Denied: approved is False and the reason is kept."""
    async with Signoff(base, api_key=AGENT_KEY) as s:
        asking = asyncio.create_task(s.request(tool="delete_file", args={"path": "a.txt"}))
        await decide_first(node, "deny", {"reason": "keep it"})
        d = await asking
    assert not d.approved and d.status == "denied" and d.reason == "keep it"
    assert "denied by web:admin: keep it" in d.describe()


async def test_gate_runs_the_function_only_when_approved(node: Running, base: str) -> None:
    """@gate asks with the function's arguments and targets, runs it once approved and
    reports the outcome; a denial raises NotApproved and the function never runs."""
    sent: list[str] = []
    async with Signoff(base, api_key=AGENT_KEY, policy_id="mailer") as s:

        @s.gate(risk="SEND", targets=lambda to, **_: [to], content=["body"])
        async def send(to: str, body: str) -> str:
            sent.append(to)
            return f"sent to {to}"

        first = asyncio.create_task(send("john@example.com", body="hello"))
        approval_id = await decide_first(node, "approve")
        assert await first == "sent to john@example.com"
        await eventually(lambda: _has_outcome(node, approval_id), what="the outcome")
        assert await outcomes(node, approval_id) == [("ok", None)]
        async with node.client() as client:
            card = (await client.get(f"/v1/approvals/{approval_id}")).json()
        assert card["policy_id"] == "mailer"

        second = asyncio.create_task(send("eve@example.com", body="hello"))
        await decide_first(node, "deny", {"reason": "who is eve"})
        with pytest.raises(NotApproved, match="who is eve") as caught:
            await second
    assert caught.value.decision.status == "denied"
    assert sent == ["john@example.com"]


async def test_gate_never_runs_arguments_changed_while_a_person_decided(
        node: Running, base: str) -> None:
    """The card shows the call's arguments as they were asked about; a list the caller
    still holds and changes meanwhile (one more recipient) makes the approved call an
    error that runs nothing, rather than a send to someone nobody saw."""
    sent: list[list[str]] = []
    async with Signoff(base, api_key=AGENT_KEY, policy_id="mailer") as s:

        @s.gate(risk="SEND")
        async def send(to: list[str], body: str) -> None:
            sent.append(list(to))

        recipients = ["alice@example.com"]
        call = asyncio.create_task(send(recipients, body="invoice attached"))
        await eventually(lambda: _any_pending(node), what="a pending request")
        async with node.client() as client:
            [item] = (await client.get("/approvals")).json()["items"]
        assert "attacker" not in str(item)
        recipients.append("attacker@evil.example")
        await decide_first(node, "approve")
        with pytest.raises(NotApproved, match="arguments changed") as caught:
            await call
    assert caught.value.decision.status == "error"
    assert sent == []


async def _any_pending(node: Running) -> bool:
    return bool(await pending_ids(node))


async def _has_outcome(node: Running, approval_id: str) -> bool:
    return bool(await outcomes(node, approval_id))


async def test_gate_reports_a_failure_and_reraises(node: Running, base: str) -> None:
    """When the gated function raises after approval, the outcome is ok=false with the
    error, and the exception reaches the caller."""
    async with Signoff(base, api_key=AGENT_KEY) as s:

        @s.gate(risk="READ", tool="fetch_report")
        async def fetch(url: str) -> None:
            raise RuntimeError("404 from upstream")

        with pytest.raises(RuntimeError, match="404 from upstream"):
            await fetch("https://example.com/r")
    async with node.client() as client:
        events = (await client.get("/audit", params={"limit": 500})).json()["items"]
    [outcome] = [e for e in events if e["kind"] == "outcome"]
    assert outcome["decision"] == "error" and "404 from upstream" in outcome["reason"]
    assert outcome["tool"] == "fetch_report"


async def test_connection_errors_are_retried_with_the_same_request(node: Running,
                                                                   base: str) -> None:
    """A connection lost after the daemon stored the request is retried with the same
    Idempotency-Key: one request exists, and the answer is its answer."""
    transport = FlakyTransport(2, after=True)
    async with Signoff(base, api_key=AGENT_KEY, transport=transport, backoff=0.01) as s:
        asking = asyncio.create_task(s.request(tool="post_message",
                                               args={"channel": "#ops", "text": "x"}))
        approval_id = await decide_first(node, "approve")
        d = await asking
    assert d.approved and d.id == approval_id
    assert transport.calls >= 3
    assert await pending_ids(node) == []
    async with node.client() as client:
        events = (await client.get("/audit", params={"limit": 500})).json()["items"]
    asked = [e for e in events if e["kind"] == "evaluation" and e["tool"] == "post_message"]
    assert len(asked) == 1


async def test_an_unreachable_daemon_is_never_approved() -> None:
    """Nothing listening: after its retries the SDK answers unreachable (approved False)
    and a gated function raises NotApproved without running."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ran: list[bool] = []
    async with Signoff(f"http://127.0.0.1:{port}", api_key=AGENT_KEY, retries=2,
                       backoff=0.01) as s:
        d = await s.request(tool="read_file", args={"path": "x"})
        assert not d.approved and d.status == "unreachable"
        assert f"unreachable at http://127.0.0.1:{port}" in (d.reason or "")

        @s.gate(risk="READ")
        async def work() -> None:
            ran.append(True)

        with pytest.raises(NotApproved, match="unreachable"):
            await work()
        assert not await s.report("a-x", ok=True)
    assert ran == []


def garbled_daemon(post: Response, poll: Response) -> FastAPI:
    """A daemon, or a proxy in front of one, answering 200 with ``post`` to every request
    and ``poll`` to every long poll."""
    app = FastAPI()
    app.post("/v1/approvals")(lambda: post)
    app.get("/v1/approvals/{approval_id}")(lambda approval_id: poll)
    return app


PENDING = Response('{"id": "a-1", "status": "pending", "decision": "ASK_USER"}',
                   media_type="application/json")
GARBLED = {
    "a login page": Response("<html>sign in to the proxy</html>", media_type="text/html"),
    "cut-off JSON": Response('{"id": "a-1", "status": "appr', media_type="application/json"),
    "a JSON list": Response('["approved"]', media_type="application/json"),
    "not UTF-8": Response(b"\xff\xfe{}", media_type="application/json"),
}


@pytest.mark.parametrize("when", ["asked", "waited"])
@pytest.mark.parametrize("garbled", list(GARBLED))
async def test_an_answer_that_is_not_a_json_object_is_an_error_not_an_exception(
        when: str, garbled: str) -> None:
    """A 200 whose body is not a JSON object, to the request or to its long poll, is
    status error (approved False), never an exception: a caller that only checks
    ``approved`` stays closed, and a gated function raises NotApproved without running."""
    post, poll = (GARBLED[garbled], PENDING) if when == "asked" else (PENDING,
                                                                      GARBLED[garbled])
    ran: list[bool] = []
    async with serve(garbled_daemon(post, poll)) as url:
        async with Signoff(url, api_key=AGENT_KEY) as s:
            d = await s.request(tool="send_email", args={"to": "a@example.com"})
            assert d.status == "error" and not d.approved, d
            assert "not a JSON object" in (d.reason or "")

            @s.gate(risk="SEND")
            async def send(to: str) -> None:
                ran.append(True)

            with pytest.raises(NotApproved, match="not a JSON object"):
                await send("a@example.com")
        with SignoffSync(url, api_key=AGENT_KEY) as sync:
            d = await asyncio.to_thread(sync.request, tool="send_email", args={"to": "b"})
            assert d.status == "error" and not d.approved
    assert ran == []


async def test_a_refused_key_is_an_error_not_an_approval(base: str) -> None:
    """A wrong key gives status error with a message naming the key (approved False)."""
    async with Signoff(base, api_key="wrong") as s:
        d = await s.request(tool="read_file", args={"path": "x"})
    assert d.status == "error" and not d.approved and "API key" in (d.reason or "")


async def test_a_bounded_wait_gives_pending(base: str) -> None:
    """request(wait=0.2) returns pending (not approved) when nobody answered in time;
    wait() then picks the request up again."""
    async with Signoff(base, api_key=AGENT_KEY) as s:
        d = await s.request(tool="delete_file", args={"path": "x"}, wait=0.2)
        assert d.pending and not d.approved and d.id
        again = await s.status(d.id)
        assert again.pending


async def test_expiry_reaches_a_waiting_client(tmp_path: Path) -> None:
    """A request nobody answers expires on the daemon; the waiting client gets expired."""
    clock = FakeClock()
    async with (running_node(tmp_path, clock=clock) as node, serve(node.app) as url,
                Signoff(url, api_key=AGENT_KEY) as s):
        asking = asyncio.create_task(s.request(tool="delete_file", args={"path": "x"},
                                               timeout=60))
        await eventually(lambda: _any_pending(node), what="a pending request")
        clock.advance(61)
        await node.node.decider.expire_due()
        d = await asking
    assert d.status == "expired" and not d.approved and d.reason == "approval timed out"


async def _any_pending(node: Running) -> bool:
    return bool(await pending_ids(node))


async def test_the_sync_twin_asks_gates_and_reports(node: Running, base: str) -> None:
    """SignoffSync does the same for scripts: request, gate, report."""
    def script() -> tuple[bool, str]:
        with SignoffSync(base, api_key=AGENT_KEY, policy_id="nightly-script") as s:
            read = s.request("list_dir", {"path": "."})

            @s.gate(risk="SEND", targets=lambda channel, **_: [channel])
            def post(channel: str, text: str) -> str:
                return f"posted to {channel}"

            return read.approved, post("#ops", text="done")

    running = asyncio.create_task(asyncio.to_thread(script))
    approval_id = await decide_first(node, "approve")
    approved, posted = await running
    assert approved and posted == "posted to #ops"
    await eventually(lambda: _has_outcome(node, approval_id), what="the outcome")


async def test_the_hermes_hook_asks_anew_when_a_model_repeats_a_call_id(
        node: Running, base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hermes calls whose model reuses the id "call_0" are each asked on their own: a read
    let through earlier never lets a later terminal command run."""
    from signoff_client import hermes

    monkeypatch.setenv("SIGNOFF_URL", base)
    monkeypatch.setenv("SIGNOFF_API_KEY", AGENT_KEY)
    monkeypatch.setenv("SIGNOFF_WAIT", "0")
    hermes.reset_client()

    def call(tool: str, args: dict[str, Any]) -> dict[str, str] | None:
        return hermes.pre_tool_call(tool_name=tool, args=args, session_id="s-1",
                                    task_id="t", tool_call_id="call_0")

    try:
        assert await asyncio.to_thread(call, "read_file", {"path": "notes.txt"}) is None
        blocked = await asyncio.to_thread(call, "terminal", {"command": "rm -rf build"})
        assert blocked is not None and "no answer yet" in blocked["message"], blocked
        assert await asyncio.to_thread(call, "read_file", {"path": "notes.txt"}) is None
    finally:
        hermes.reset_client()
    async with node.client() as client:
        items = (await client.get("/approvals")).json()["items"]
    assert [i["action"]["tool"] for i in items] == ["run_command"]


def test_the_sdk_imports_only_httpx_and_the_standard_library() -> None:
    """Importing signoff_client pulls in none of the daemon's stack (it ships alone)."""
    code = ("import sys, signoff_client, signoff_client.hermes; "
            "heavy = [m for m in ('signoff', 'fastapi', 'sqlalchemy', 'pydantic', "
            "'starlette', 'sqlmodel') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_gate_refuses_the_wrong_kind_of_function() -> None:
    """Signoff.gate needs an async function, SignoffSync.gate a plain one."""
    s = Signoff("http://127.0.0.1:9", api_key=AGENT_KEY)
    with pytest.raises(TypeError, match=r"SignoffSync\.gate"):
        s.gate(risk="READ")(lambda: None)
    with SignoffSync("http://127.0.0.1:9") as sync, pytest.raises(TypeError):
        async def job() -> None: ...
        sync.gate(risk="READ")(job)
