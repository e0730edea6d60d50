"""Ask a signoff daemon before an agent acts: `Signoff` (async) and `SignoffSync`.

    async with Signoff("http://127.0.0.1:8080", api_key=KEY) as s:
        d = await s.request(tool="send_email", args={"to": "john@example.com"},
                            policy_id="run-42")
        if d.approved:
            ...                                   # do it, then:
            await s.report(d.id, ok=True)

        @s.gate(risk="SEND", targets=lambda to, **_: [to])
        async def send(to: str, body: str) -> None: ...   # raises NotApproved unless approved

`request()` asks (``POST /v1/approvals``) and, unless told not to, waits for the answer
with long polls (``GET /v1/approvals/{id}?wait=30s``) until a person decides or the
request expires. READ actions, grants and prohibitions are settled by the daemon's policy
at once.

**Fail closed.** `Decision.approved` is True only when the daemon said "approved". A
daemon that cannot be reached (after ``retries`` attempts with exponential backoff), a
refused key, a bad request, a denial, a block and an expiry all give ``approved == False``
with the reason in `Decision.reason`; `gate` raises `NotApproved` for every one of them.
None of these methods raise for network trouble, nor for an answer that is not a JSON
object (status error): a caller that only checks ``d.approved`` cannot act by mistake.

Retries are safe: every request carries an ``Idempotency-Key`` (a fresh one per call
unless given), so a retried POST returns the same request instead of asking twice.

This module needs only httpx and the standard library, so it ships alone in the small
``signoff-client`` distribution (and is re-exported as ``signoff.client``).
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import functools
import inspect
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, ParamSpec, TypeVar

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"
POLL_SECONDS = 30.0  # one long-poll round (the daemon caps a round at 60 s)
MAX_DEPTH = 32  # the daemon refuses JSON nested deeper (INTERFACE: Requests)
RETRY_STATUSES = frozenset({502, 503, 504})  # a daemon restarting, a proxy in between

P = ParamSpec("P")
R = TypeVar("R")
Targets = Iterable[str] | Callable[..., Iterable[str]] | None
Why = str | Callable[..., str] | None


@dataclass(frozen=True)
class Decision:
    """The daemon's answer about one action.

    ``status``: approved | denied | expired | pending or held (not waited for) | unreachable
    (the daemon could not be reached) | error (the daemon refused the call itself).
    ``decision`` is the policy's verdict: ALLOW or BLOCK when it settled the request,
    ASK_USER when a person was asked.
    """

    id: str | None
    status: str
    decision: str | None = None
    scope: str | None = None
    decided_by: str | None = None
    decided_at: str | None = None
    reason: str | None = None
    expires_at: str | None = None
    # Approved with edited args (only for a request asked with ``editable=True``): run
    # ``args`` instead of the ones asked about, or nothing.
    edited: bool = False
    args: dict[str, Any] | None = None

    @property
    def approved(self) -> bool:
        """True only for an approval by a person or by the policy (fail closed)."""
        return self.status == "approved"

    @property
    def pending(self) -> bool:
        """True while a person may still answer, or still undo an approval that waits out
        its hold (status "held"): keep waiting, it is not approved yet."""
        return self.status in ("pending", "held")

    def describe(self) -> str:
        """One line for logs and block messages: "denied by slack:U1: not now"."""
        text = self.status
        if self.edited and self.approved:
            text += " with edited args"
        if self.decided_by and self.status in ("approved", "denied"):
            text += f" by {self.decided_by}"
        return f"{text}: {self.reason}" if self.reason else text


class NotApproved(Exception):
    """The action was not approved (denied, blocked, expired, or the daemon unreachable)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(f"not approved: {decision.describe()}")
        self.decision = decision


@dataclass(frozen=True)
class _Call:
    """One HTTP call the flow wants made."""

    method: str
    path: str
    body: Any = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    read_timeout: float | None = None


@dataclass(frozen=True)
class _Answer:
    """What came back: a response, or why there was none."""

    response: httpx.Response | None
    error: str | None = None


Flow = Generator[_Call, _Answer, Decision]


def _decision(body: Mapping[str, Any], fallback_id: str | None = None) -> Decision:
    def text(key: str) -> str | None:
        value = body.get(key)
        return str(value) if value is not None else None

    status, reason = str(body.get("status", "error")), text("reason")
    args = body.get("args")
    edited = body.get("edited") is True
    if edited and not isinstance(args, dict):  # never fall back to the asked args
        status, reason = "error", "approved with edited args, but the answer lacks them"
    return Decision(id=text("id") or fallback_id, status=status,
                    decision=text("decision"), scope=text("scope"),
                    decided_by=text("decided_by"), decided_at=text("decided_at"),
                    reason=reason, expires_at=text("expires_at"), edited=edited,
                    args=dict(args) if edited and isinstance(args, dict) else None)


def _failure(answer: _Answer, approval_id: str | None, base: str) -> Decision | None:
    """The fail-closed Decision for a call that did not succeed, else None."""
    response = answer.response
    if response is None:
        return Decision(id=approval_id, status="unreachable",
                        reason=f"signoff daemon unreachable at {base}: {answer.error}")
    if response.is_success:
        return None
    try:
        detail = str(response.json().get("detail", ""))
    except (ValueError, AttributeError):
        detail = response.text[:200]
    if response.status_code == 401:
        detail = "the daemon refused the API key (401): check SIGNOFF_API_KEY"
    return Decision(id=approval_id, status="error",
                    reason=f"{response.status_code}: {detail}" if detail else
                    f"the daemon answered {response.status_code}")


def _answered(answer: _Answer, approval_id: str | None, base: str) -> Decision:
    """The Decision a successful answer holds. A body that is not a JSON object (a proxy's
    login page, a cut-off answer) is an error Decision: these methods never raise for
    what comes back, so a caller that only checks ``approved`` stays closed."""
    assert answer.response is not None
    try:
        body = answer.response.json()
    except ValueError:  # not JSON, or not UTF-8
        body = None
    if not isinstance(body, dict):
        return Decision(id=approval_id, status="error",
                        reason=f"the answer from {base} ({answer.response.status_code}) is "
                               "not a JSON object")
    return _decision(body, approval_id)


def _wait_flow(approval_id: str, base: str, seconds: float | None) -> Flow:
    """Long-poll until the request is decided, expires, or ``seconds`` have passed."""
    end = None if seconds is None else time.monotonic() + seconds
    while True:
        left = POLL_SECONDS if end is None else max(0.0, min(POLL_SECONDS,
                                                             end - time.monotonic()))
        answer = yield _Call("GET", f"/v1/approvals/{approval_id}",
                             params={"wait": f"{left:.3f}s"}, read_timeout=left + 15)
        failed = _failure(answer, approval_id, base)
        if failed is not None:
            return failed
        decision = _answered(answer, approval_id, base)
        if not decision.pending or (end is not None and time.monotonic() >= end):
            return decision


def _waited_on(call: _Call) -> str | None:
    """The request a call long-polls on (None for any other call)."""
    prefix = "/v1/approvals/"
    if call.method == "GET" and call.path.startswith(prefix):
        return call.path[len(prefix):] or None
    return None


def _pending_id(answer: _Answer) -> str | None:
    """The id of the pending request a POST /v1/approvals answer reports, if any."""
    response = answer.response
    if response is None or not response.is_success:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("status") != "pending":
        return None
    found = body.get("id")
    return str(found) if found else None


_NO_OTEL: list[bool] = []  # set once the caller's environment has no OpenTelemetry


def trace_headers() -> dict[str, str]:
    """The caller's current trace context (W3C ``traceparent``) when its program uses
    OpenTelemetry, so signoff's spans join the caller's trace; the SDK never depends on
    OpenTelemetry itself, and without it (or outside a span) this is empty."""
    if _NO_OTEL:
        return {}
    try:
        from opentelemetry import propagate
    except ImportError:
        _NO_OTEL.append(True)
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {"traceparent": carrier["traceparent"]} if "traceparent" in carrier else {}


def _request_flow(body: dict[str, Any], key: str, base: str, wait: bool | float,
                  traceparent: str | None = None) -> Flow:
    trace = {"traceparent": traceparent} if traceparent else trace_headers()
    answer = yield _Call("POST", "/v1/approvals", body=body,
                         headers={"Idempotency-Key": key, **trace})
    failed = _failure(answer, None, base)
    if failed is not None:
        return failed
    decision = _answered(answer, None, base)
    if not decision.pending or wait is False or decision.id is None:
        return decision
    seconds = None if wait is True else float(wait)
    return (yield from _wait_flow(decision.id, base, seconds))


def jsonable(value: Any, _depth: int = 0) -> Any:
    """A function argument as JSON: datetimes and dates as ISO 8601, UUIDs, paths and
    decimals as text, sets as sorted lists, bytes as UTF-8 text (or their repr), mappings
    and sequences item by item; anything else by its repr, so a call is always shown
    (a structure deeper than the daemon accepts, or one that contains itself, too)."""
    if _depth > MAX_DEPTH:
        return repr(value)[:200]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, PurePath, decimal.Decimal)):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return repr(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v, _depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [jsonable(v, _depth + 1) for v in value]
    return repr(value)


def tool_name(fn: Callable[..., Any]) -> str:
    """A function's dotted name as a tool name; a nested function's without the
    ``<locals>`` parts Python puts in its qualified name (``mod.outer.send``)."""
    return f"{fn.__module__}.{fn.__qualname__.replace('.<locals>', '')}"


def _call_args(fn: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _shown_args(arguments: dict[str, Any]) -> dict[str, Any]:
    """A gated call's arguments as the person is shown them."""
    return {k: jsonable(v) for k, v in arguments.items() if k not in ("self", "cls")}


def _unchanged(decision: Decision, asked: dict[str, Any], fn: Callable[..., Any],
               args: tuple[Any, ...], kwargs: dict[str, Any]) -> Decision:
    """``decision``, or an error when the call's arguments are no longer what the person
    saw: a list or dict the caller still holds may have changed while they decided, and
    the function runs with the objects themselves, not with the copy that was shown."""
    if not decision.approved or _shown_args(_call_args(fn, args, kwargs)) == asked:
        return decision
    return Decision(id=decision.id, status="error", decision=decision.decision,
                    reason="the arguments changed while a person decided; nothing ran")


class _Base:
    """What both clients share: settings and the request body."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None,
                 policy_id: str | None = None, requester: str | None = None,
                 timeout: float = 10.0, retries: int = 3, backoff: float = 0.25) -> None:
        self.url = (url or os.environ.get("SIGNOFF_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("SIGNOFF_API_KEY")
        # "session" grants last as long as this policy_id: by default, this client.
        self.policy_id = policy_id or f"sdk-{uuid.uuid4().hex[:12]}"
        self.requester = requester or f"python@{socket.gethostname()}"
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "signoff-client/0.1"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _timeout(self, call: _Call) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=call.read_timeout or self.timeout)

    def _delay(self, attempt: int) -> float:
        return float(self.backoff * (2 ** attempt))

    def _body(self, tool: str, args: Mapping[str, Any] | None, *, policy_id: str | None,
              risk: str | None, capability: str | None, targets: Iterable[str] | None,
              content: Iterable[str] | None, goal: str | None, why: str | None,
              timeout: float | None, editable: bool = False,
              definition: str | None = None,
              description: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"tool": tool, "args": dict(args or {}),
                                "policy_id": policy_id or self.policy_id,
                                "requester": self.requester}
        if editable:
            body["editable"] = True
        optional = {"risk": risk.upper() if risk else None, "capability": capability,
                    "goal": goal, "why": why, "definition": definition,
                    "description": description,
                    "timeout": f"{timeout:g}s" if timeout is not None else None}
        body.update({k: v for k, v in optional.items() if v is not None})
        if targets is not None:
            body["targets"] = [str(t) for t in targets]
        if content is not None:
            body["content"] = [str(c) for c in content]
        return body

    def _gate_request(self, fn: Callable[..., Any], arguments: dict[str, Any], *,
                      tool: str | None, targets: Targets, why: Why) -> dict[str, Any]:
        found = targets(**arguments) if callable(targets) else targets
        reason = why(**arguments) if callable(why) else why
        return {"tool": tool or tool_name(fn), "args": _shown_args(arguments),
                "targets": list(found) if found is not None else None, "why": reason}


class Signoff(_Base):
    """The async client (httpx.AsyncClient). Use it as ``async with Signoff(...) as s``.

    ``url`` and ``api_key`` default to ``SIGNOFF_URL`` and ``SIGNOFF_API_KEY``;
    ``policy_id`` is where session and always grants live (default: one per client);
    ``timeout`` is the per-call HTTP timeout; connection errors are retried ``retries``
    times, ``backoff`` seconds doubling each time.
    """

    def __init__(self, url: str | None = None, *, api_key: str | None = None,
                 policy_id: str | None = None, requester: str | None = None,
                 timeout: float = 10.0, retries: int = 3, backoff: float = 0.25,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(url, api_key=api_key, policy_id=policy_id, requester=requester,
                         timeout=timeout, retries=retries, backoff=backoff)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers(),
                                       timeout=timeout, transport=transport)

    async def __aenter__(self) -> Signoff:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _send(self, call: _Call) -> _Answer:
        error = "no attempt made"
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.body, params=call.params,
                    headers=call.headers, timeout=self._timeout(call))
            except httpx.TransportError as exc:
                error = str(exc) or type(exc).__name__
            else:
                if response.status_code not in RETRY_STATUSES or attempt == self.retries:
                    return _Answer(response)
                error = f"HTTP {response.status_code}"
            if attempt < self.retries:
                await asyncio.sleep(self._delay(attempt))
        return _Answer(None, error)

    async def _run(self, flow: Flow, *, withdraw: bool = False) -> Decision:
        """Drive ``flow``; with ``withdraw``, a cancelled wait takes its request back
        (DELETE, shielded from the cancellation) before the cancellation goes on."""
        try:
            call = next(flow)
            while True:
                sending = asyncio.ensure_future(self._send(call))
                try:
                    answer = await asyncio.shield(sending)
                except asyncio.CancelledError:
                    if not withdraw:
                        sending.cancel()
                        raise
                    await asyncio.shield(self._take_back(call, sending))
                    raise
                call = flow.send(answer)
        except StopIteration as done:
            result: Decision = done.value
            return result

    async def _take_back(self, call: _Call, sending: asyncio.Future[_Answer]) -> None:
        """After a cancellation: withdraw the request being waited on, or the one the
        cancelled POST created (its answer is awaited to learn the id)."""
        approval_id = _waited_on(call)
        if approval_id is None and call.method == "POST":
            approval_id = _pending_id(await sending)
        else:
            sending.cancel()
        if approval_id is not None:
            await self.withdraw(approval_id)

    async def withdraw(self, approval_id: str) -> bool:
        """Take back a pending request (nobody needs to answer it any more); False when it
        could not be (already decided, not yours, daemon unreachable)."""
        try:
            response = await self._http.delete(f"/v1/approvals/{approval_id}")
        except httpx.HTTPError:
            return False
        return response.is_success

    async def request(self, tool: str, args: Mapping[str, Any] | None = None, *,
                      policy_id: str | None = None, risk: str | None = None,
                      capability: str | None = None, targets: Iterable[str] | None = None,
                      content: Iterable[str] | None = None, goal: str | None = None,
                      why: str | None = None, timeout: float | None = None,
                      idempotency_key: str | None = None,
                      wait: bool | float = True, editable: bool = False,
                      traceparent: str | None = None,
                      definition: str | None = None,
                      description: str | None = None) -> Decision:
        """Ask about one action; wait for the answer (``wait``: True until decided or
        expired, a number of seconds at most, False not at all). ``timeout`` is how long a
        person has to answer (default: the daemon's approvals.timeout). ``editable``: the
        caller runs edited args (an approval may then carry them: ``Decision.edited`` and
        ``Decision.args``); without it a person cannot edit the request. ``traceparent``:
        the W3C trace context to file the request under (default: the caller's current
        OpenTelemetry span, when it has one). ``definition``: a digest of the tool's
        definition as the agent was shown it (an MCP tool's description, schema and
        annotations): session and always answers then cover that definition only.
        ``description``: what the tool says it does, as the agent was shown it (at most
        1,000 characters, no control characters but line breaks): the card quotes it as
        the tool's server's claim; it changes neither grants nor idempotency."""
        body = self._body(tool, args, policy_id=policy_id, risk=risk, capability=capability,
                          targets=targets, content=content, goal=goal, why=why,
                          timeout=timeout, editable=editable, definition=definition,
                          description=description)
        key = idempotency_key or uuid.uuid4().hex
        return await self._run(_request_flow(body, key, self.url, wait, traceparent),
                               withdraw=True)

    async def wait(self, approval_id: str, *, timeout: float | None = None) -> Decision:
        """Wait until a request is decided or expired (or ``timeout`` seconds passed); a
        cancelled wait withdraws the request (nobody is left deciding for no one)."""
        return await self._run(_wait_flow(approval_id, self.url, timeout), withdraw=True)

    async def status(self, approval_id: str) -> Decision:
        """A request's status now, without waiting."""
        return await self._run(_wait_flow(approval_id, self.url, 0.0))

    async def report(self, approval_id: str, ok: bool, detail: str | None = None) -> bool:
        """Tell the daemon what was done with a decided request (audited once); False when
        it could not be recorded (already reported, unknown, daemon unreachable)."""
        answer = await self._send(_Call("POST", f"/v1/approvals/{approval_id}/outcome",
                                        body={"ok": ok, "detail": detail}))
        return answer.response is not None and answer.response.is_success

    def gate(self, *, risk: str | None = None, tool: str | None = None,
             capability: str | None = None, targets: Targets = None,
             content: Iterable[str] | None = None, policy_id: str | None = None,
             why: Why = None, goal: str | None = None, report: bool = True
             ) -> Callable[[Callable[P, Coroutine[Any, Any, R]]],
                           Callable[P, Coroutine[Any, Any, R]]]:
        """Decorate an async function so that each call asks first and raises
        `NotApproved` unless approved. ``targets`` and ``why`` may be callables that get
        the function's arguments by name; ``tool`` defaults to the function's dotted name;
        the outcome (ok, or the exception) is reported afterwards unless ``report=False``."""
        def wrap(fn: Callable[P, Coroutine[Any, Any, R]]
                 ) -> Callable[P, Coroutine[Any, Any, R]]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"{fn.__qualname__} is not async: use SignoffSync.gate")

            @functools.wraps(fn)
            async def gated(*args: P.args, **kwargs: P.kwargs) -> R:
                ask = self._gate_request(fn, _call_args(fn, args, kwargs), tool=tool,
                                         targets=targets, why=why)
                decision = await self.request(**ask, risk=risk, capability=capability,
                                              content=content, policy_id=policy_id,
                                              goal=goal)
                decision = _unchanged(decision, ask["args"], fn, args, kwargs)
                if not decision.approved:
                    raise NotApproved(decision)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException as exc:
                    if report and decision.id:
                        await self.report(decision.id, False, repr(exc)[:500])
                    raise
                if report and decision.id:
                    await self.report(decision.id, True)
                return result

            return gated
        return wrap


class SignoffSync(_Base):
    """The same client for scripts and sync hooks (httpx.Client); same arguments."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None,
                 policy_id: str | None = None, requester: str | None = None,
                 timeout: float = 10.0, retries: int = 3, backoff: float = 0.25,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(url, api_key=api_key, policy_id=policy_id, requester=requester,
                         timeout=timeout, retries=retries, backoff=backoff)
        self._http = httpx.Client(base_url=self.url, headers=self._headers(), timeout=timeout,
                                  transport=transport)

    def __enter__(self) -> SignoffSync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _send(self, call: _Call) -> _Answer:
        error = "no attempt made"
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(call.method, call.path, json=call.body,
                                              params=call.params, headers=call.headers,
                                              timeout=self._timeout(call))
            except httpx.TransportError as exc:
                error = str(exc) or type(exc).__name__
            else:
                if response.status_code not in RETRY_STATUSES or attempt == self.retries:
                    return _Answer(response)
                error = f"HTTP {response.status_code}"
            if attempt < self.retries:
                time.sleep(self._delay(attempt))
        return _Answer(None, error)

    def _run(self, flow: Flow) -> Decision:
        try:
            call = next(flow)
            while True:
                call = flow.send(self._send(call))
        except StopIteration as done:
            result: Decision = done.value
            return result

    def request(self, tool: str, args: Mapping[str, Any] | None = None, *,
                policy_id: str | None = None, risk: str | None = None,
                capability: str | None = None, targets: Iterable[str] | None = None,
                content: Iterable[str] | None = None, goal: str | None = None,
                why: str | None = None, timeout: float | None = None,
                idempotency_key: str | None = None, wait: bool | float = True,
                editable: bool = False, traceparent: str | None = None,
                definition: str | None = None,
                description: str | None = None) -> Decision:
        """See `Signoff.request`."""
        body = self._body(tool, args, policy_id=policy_id, risk=risk, capability=capability,
                          targets=targets, content=content, goal=goal, why=why,
                          timeout=timeout, editable=editable, definition=definition,
                          description=description)
        key = idempotency_key or uuid.uuid4().hex
        return self._run(_request_flow(body, key, self.url, wait, traceparent))

    def wait(self, approval_id: str, *, timeout: float | None = None) -> Decision:
        """See `Signoff.wait`."""
        return self._run(_wait_flow(approval_id, self.url, timeout))

    def status(self, approval_id: str) -> Decision:
        """See `Signoff.status`."""
        return self._run(_wait_flow(approval_id, self.url, 0.0))

    def report(self, approval_id: str, ok: bool, detail: str | None = None) -> bool:
        """See `Signoff.report`."""
        answer = self._send(_Call("POST", f"/v1/approvals/{approval_id}/outcome",
                                  body={"ok": ok, "detail": detail}))
        return answer.response is not None and answer.response.is_success

    def withdraw(self, approval_id: str) -> bool:
        """See `Signoff.withdraw`."""
        try:
            response = self._http.delete(f"/v1/approvals/{approval_id}")
        except httpx.HTTPError:
            return False
        return response.is_success

    def gate(self, *, risk: str | None = None, tool: str | None = None,
             capability: str | None = None, targets: Targets = None,
             content: Iterable[str] | None = None, policy_id: str | None = None,
             why: Why = None, goal: str | None = None, report: bool = True
             ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """See `Signoff.gate`, for plain functions."""
        def wrap(fn: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(fn):
                raise TypeError(f"{fn.__qualname__} is async: use Signoff.gate")

            @functools.wraps(fn)
            def gated(*args: P.args, **kwargs: P.kwargs) -> R:
                ask = self._gate_request(fn, _call_args(fn, args, kwargs), tool=tool,
                                         targets=targets, why=why)
                decision = self.request(**ask, risk=risk, capability=capability,
                                        content=content, policy_id=policy_id, goal=goal)
                decision = _unchanged(decision, ask["args"], fn, args, kwargs)
                if not decision.approved:
                    raise NotApproved(decision)
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    if report and decision.id:
                        self.report(decision.id, False, repr(exc)[:500])
                    raise
                if report and decision.id:
                    self.report(decision.id, True)
                return result

            return gated
        return wrap
