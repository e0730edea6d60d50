"""A local OpenAI-compatible `/v1/chat/completions` server (as OpenAI, Ollama, vLLM answer).

`FakeOpenAI(reply=...)`: ``reply`` is a list of tool calls ``[(name, args_dict_or_raw_str)]``
(answered as ``message.tool_calls`` with JSON-string ``arguments``, the real wire shape),
a plain string (answered as ``message.content``), or None for an HTTP 500.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

Reply = list[tuple[str, Any]] | str | None


class FakeOpenAI:
    """Serves completions on 127.0.0.1 and records every request body."""

    def __init__(self, reply: Reply = None) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app)
        self.port = 0

    @property
    def base_url(self) -> str:
        """What to put in ``[planner] base_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def _complete(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        if self.reply is None:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if isinstance(self.reply, str):
            message["content"] = self.reply
        else:
            message["tool_calls"] = [
                {"id": f"call_{n}", "type": "function",
                 "function": {"name": name,
                              "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for n, (name, args) in enumerate(self.reply)]
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1764460800,
            "model": "llama3.1", "choices": [{"index": 0, "message": message,
                                             "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def __aenter__(self) -> FakeOpenAI:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
