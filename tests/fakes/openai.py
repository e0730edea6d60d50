"""A local OpenAI-compatible `/v1/chat/completions` server (as OpenAI, Ollama, vLLM answer).

`FakeOpenAI(reply=...)` gives the same answer to every request: ``reply`` is a list of tool
calls ``[(name, args_dict_or_raw_str)]`` (answered as ``message.tool_calls`` with
JSON-string ``arguments``, the real wire shape), a plain string (answered as
``message.content``), or None for an HTTP 500.

`FakeOpenAI(script=fn)` answers each request with ``fn(Seen(messages))``: an `Answer`, a
reply as above, a `Failure` (an error
answer as vLLM or Ollama send it: `VLLM_NO_TOOL_CHOICE`, `OLLAMA_NO_MODEL`, `ERROR_WITH_200`)
or None (HTTP 500). The answer depends only on the messages received, as a
real model's does, so a conversation resumed after a restart gets the answers it would
have got. `steps(a, b, c)` answers turn 1 with ``a``, turn 2 with ``b``, …

``async with FakeOpenAI(...)`` serves it in the running loop; ``with FakeOpenAI(...)`` from
its own thread and loop, for tests that drive a daemon subprocess from synchronous code
(both from `tests.fakes.server.FakeServer`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import FakeServer

Reply = list[tuple[str, Any]] | str | None


@dataclass
class Answer:
    """One scripted reply: text, tool calls, or both."""

    content: str | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, args or raw string)
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    ids: list[str | None] | None = None  # the calls' ids as a sloppy server sends them
    object_args: bool = False  # arguments as a JSON object, not JSON text (some servers)


@dataclass
class Failure:
    """An error answer as a real server sends it: a status code and a JSON body."""

    status: int
    body: Any


# What vLLM answers a request with tools when it was started without tool support.
VLLM_NO_TOOL_CHOICE = Failure(400, {
    "object": "error", "type": "BadRequestError", "param": None, "code": 400,
    "message": '"auto" tool choice requires --enable-auto-tool-choice and '
               "--tool-call-parser to be set"})
# What Ollama answers for a model it does not have (its OpenAI API).
OLLAMA_NO_MODEL = Failure(404, {"error": {
    "message": 'model "llama3.1" not found, try pulling it first', "type": "api_error",
    "param": None, "code": None}})
# A server that says "error" with a 200 (seen behind some proxies).
ERROR_WITH_200 = Failure(200, {"error": {"message": "upstream model overloaded"}})


class Seen:
    """The messages of one request, with what scripts ask about them."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages

    @property
    def turn(self) -> int:
        """1 for the first request of a conversation, 2 after one answer, …"""
        return 1 + sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def goal(self) -> str:
        """The first user message."""
        return next(str(m["content"]) for m in self.messages if m.get("role") == "user")

    def results(self) -> list[str]:
        """The tool results after the last answer, in order."""
        out: list[str] = []
        for m in reversed(self.messages):
            if m.get("role") == "assistant":
                break
            if m.get("role") == "tool":
                out.insert(0, str(m.get("content")))
        return out

    def result(self) -> Any:
        """The last tool result, decoded from its JSON text."""
        return json.loads(self.results()[-1])


Script = Callable[[Seen], "Answer | Failure | Reply"]


def steps(*answers: Answer | Failure | Reply) -> Script:
    """A script answering turn n with the n-th answer (the last one after that)."""

    def script(seen: Seen) -> Answer | Failure | Reply:
        return answers[min(seen.turn, len(answers)) - 1]

    return script


def _message(answer: Answer, request_no: int) -> tuple[dict[str, Any], str]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.calls:
        message["tool_calls"] = [
            {"id": f"call_{request_no}_{n}", "type": "function",
             "function": {"name": name,
                          "arguments": args if isinstance(args, str) or answer.object_args
                          else json.dumps(args)}}
            for n, (name, args) in enumerate(answer.calls)]
        for call, given in zip(message["tool_calls"], answer.ids or [], strict=False):
            if given is None:
                del call["id"]
            else:
                call["id"] = given
    return message, answer.finish_reason or ("tool_calls" if answer.calls else "stop")


class FakeOpenAI(FakeServer):
    """Serves completions on 127.0.0.1 and records every request body."""

    def __init__(self, reply: Reply | Failure = None, *, script: Script | None = None
                 ) -> None:
        self.reply = reply
        self.script = script
        self.requests: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        """The chat completions endpoint."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        return app

    @property
    def base_url(self) -> str:
        """What to put in ``[planner] base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        reply = self.script(Seen(body["messages"])) if self.script else self.reply
        if reply is None:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if isinstance(reply, Failure):
            return web.json_response(reply.body, status=reply.status)
        if not isinstance(reply, Answer):
            reply = Answer(content=reply) if isinstance(reply, str) else Answer(calls=reply)
        message, finish = _message(reply, len(self.requests))
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
            "created": 1764460800, "model": body.get("model", "llama3.1"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
