"""Parked long polls held below FastAPI: a waiter keeps one future and two small frames.

``GET /v1/approvals/{id}?wait=30s`` could park inside its route, but then every parked
request keeps the whole FastAPI stack alive while it waits (the routing frames, two
``AsyncExitStack`` s, the exception wrappers, the solved dependencies, the `Request`).
`LongPolls` sits inside the auth middleware and takes the wait out of the query: the route
answers the request's status at once (authorization, the role gate, 404 and validation
all as before), and only when that answer is still ``pending`` or ``held`` does this layer
park, on the decider's `ApprovalWatch`, keeping nothing of the route. Woken (a decision
here, or the shared re-check for one elsewhere), it asks the route again, handing over the
request as committed (`WOKEN_BY`) so a local decision answers its waiters without reading
it back; a final one it renders itself (`Answer.render`), as the route would. Anything it
cannot parse (a second ``wait``, a malformed one) goes to the route unchanged, which
answers its 422 (or parks there, as before).

At most `LOOKS` first looks (the ones that read the store) run at once: 10,000 polls
arriving together would otherwise all sit deep in the route at the same moment, their
reads queued for the store's threads, and that peak stays in the process's memory after
they park (bench/waiters.py: 32 MB per 1,000 waiters before, 16 after, the bare HTTP
stack's own figure).
"""

from __future__ import annotations

import asyncio
import json
import re
from urllib.parse import parse_qsl, urlencode

from pydantic import TypeAdapter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from signoff.api.approvals import WAIT_PATTERN, WOKEN_BY, request_status, wait_seconds
from signoff.api.errors import ApiError
from signoff.api.schemas import RequestStatusOut
from signoff.runtime.models import Approval, ApprovalStatus
from signoff.runtime.watch import ApprovalWatch

LOOKS = 32
STATUS_OUT = TypeAdapter(RequestStatusOut)
STATUS_PATH = re.compile(r"^/v1/approvals/([^/]+)$")


class Answer:
    """One answer of the route, buffered until it is the one to send."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.status = 0

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        self.messages.append(message)

    def render(self, approval: Approval) -> Answer:
        """The route's own 200 for ``approval``: `request_status` through its response
        model (`RequestStatusOut`, by alias, as FastAPI serializes it), without the
        route's stack — a burst of decisions answers each waiter in a fraction of it."""
        body = STATUS_OUT.dump_json(STATUS_OUT.validate_python(request_status(approval)),
                                    by_alias=True)
        self.status = 200
        self.messages = [
            {"type": "http.response.start", "status": 200,
             "headers": [(b"content-length", str(len(body)).encode("latin-1")),
                         (b"content-type", b"application/json")]},
            {"type": "http.response.body", "body": body}]
        return self

    @property
    def settled(self) -> bool:
        """Anything but a 200 saying ``pending`` or ``held`` is the final answer."""
        if self.status != 200:
            return True
        body = b"".join(m.get("body", b"") for m in self.messages
                        if m["type"] == "http.response.body")
        try:
            return bool(ApprovalStatus(json.loads(body)["status"]).final)
        except (ValueError, KeyError, TypeError):
            return True


def long_poll(scope: Scope) -> tuple[str, float, bytes] | None:
    """(request id, seconds, the query without ``wait``) of a long poll this layer holds,
    or None to leave the request to the route as it is."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return None
    found = STATUS_PATH.match(scope["path"])
    if found is None:
        return None
    pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                      keep_blank_values=True)
    waits = [value for name, value in pairs if name == "wait"]
    if len(waits) != 1 or len(waits[0]) > 20 or not WAIT_PATTERN.match(waits[0]):
        return None
    try:
        seconds = wait_seconds(waits[0])
    except ApiError:
        return None
    if seconds <= 0:
        return None
    rest = urlencode([(name, value) for name, value in pairs if name != "wait"])
    return found.group(1), seconds, rest.encode("latin-1")


class LongPolls:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, *, watch: ApprovalWatch) -> None:
        self.app = app
        self.watch = watch
        # Made in the first request's loop (the middleware stack is built there).
        self.looking = asyncio.Semaphore(LOOKS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        poll = long_poll(scope)
        if poll is None:
            await self.app(scope, receive, send)
            return
        approval_id, seconds, query = poll

        async def look(woken_by: Approval | None) -> tuple[Answer, bool]:
            answer = Answer()
            if woken_by is not None and woken_by.id == approval_id and woken_by.status.final:
                # Decided here: the route authorized this caller on the first look and the
                # request's owner does not change, so its final status is the answer.
                return answer.render(woken_by), True
            # A fresh copy each time: the route writes its own keys into its scope.
            inner = {**scope, "query_string": query, WOKEN_BY: woken_by}
            if woken_by is not None:
                # The committed request in hand: no read, so no queue behind new polls.
                await self.app(inner, receive, answer.send)
            else:
                async with self.looking:
                    await self.app(inner, receive, answer.send)
            return answer, answer.settled

        final = await self.watch.wait_until(approval_id, look, seconds)
        for message in final.messages:
            await send(message)
