"""`signoff mcp-permission`: Claude Code's permission prompts as signoff approvals.

An MCP server on stdio (the SDK's `MCPServer`) with one tool, ``approve(tool_name,
input)``, in the shape ``claude --permission-prompt-tool`` expects: the answer is the JSON
text ``{"behavior": "allow", "updatedInput": input}`` or ``{"behavior": "deny",
"message": …}``. Each prompt becomes a request to the running daemon (``POST
/v1/approvals``; policy_id = this server's session, i.e. one Claude Code session), so it
is decided by the same policy and by a person on any surface, a phone included.

How each Claude Code tool is asked (risk, targets, fingerprint, card words) is
`signoff.cli.claude_tools` (the project is this process's working directory, where
Claude Code started it): writes inside the project are DRAFT, writes through a symlink out
of it, to its git, CI or hook files, or anywhere else are DESTRUCTIVE; reads outside it
ask. Every failure (daemon down, bad key, expiry) is a deny: fail closed.
"""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from signoff.cli.claude_tools import ask_for, call_digest
from signoff.cli.gate import PROGRESS_EVERY
from signoff.client import Decision, Signoff

# Claude Code abandons a permission call after about 5 minutes: answer before that.
WAIT_LIMIT = 270.0


def request_for(tool_name: str, args: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """What the daemon is asked for one prompt (`claude_tools.ask_for`, as keywords)."""
    return ask_for(tool_name, args, cwd).request()


class PermissionPrompts:
    """Turns each prompt into a request and its decision into Claude Code's answer.

    Claude Code gives up on a permission call after about five minutes, so a prompt is
    waited on for at most ``wait_limit`` (4.5 minutes): still pending then, the answer is a
    deny that says so ("still pending in signoff … approve it there, then retry"), and the
    request stays open. When Claude retries the same call in this session, the prompt is
    put on that request again: the person's answer, given meanwhile from a phone, lands.
    """

    def __init__(self, client: Signoff, *, cwd: Path, wait_limit: float = WAIT_LIMIT,
                 progress_every: float = PROGRESS_EVERY) -> None:
        self.client = client
        self.cwd = cwd
        self.wait_limit = wait_limit
        self.progress_every = progress_every
        self.policy_id = f"claude-code:{uuid.uuid4().hex[:12]}"
        self.left_pending: dict[str, str] = {}  # call digest -> approval id
        # How often each tool_use_id was prompted: model servers reuse call ids ("call_0"),
        # and the same id with the same input must not replay an approved Once.
        self.prompted: dict[str, int] = {}

    async def answer(self, tool_name: str, args: dict[str, Any], *,
                     tool_use_id: str | None = None, ctx: Context | None = None) -> str:
        """The JSON text Claude Code reads: allow with the input unchanged, or deny."""
        digest = call_digest(self.policy_id, tool_name, args)
        decision = await self._earlier(digest)
        if decision is None:
            asked = request_for(tool_name, args, self.cwd)
            key = None
            if tool_use_id:
                seen = self.prompted[tool_use_id] = self.prompted.get(tool_use_id, 0) + 1
                key = f"{self.policy_id}:{tool_use_id}" + (f":{seen}" if seen > 1 else "")
            decision = await self.client.request(
                policy_id=self.policy_id, idempotency_key=key,
                goal=f"Claude Code wants to use {tool_name} in {self.cwd}", wait=False,
                **asked)
        decision = await self._wait(decision, tool_name, ctx)
        if decision.approved:
            return json.dumps({"behavior": "allow", "updatedInput": args})
        if decision.pending and decision.id is not None:
            self.left_pending[digest] = decision.id
            return json.dumps({"behavior": "deny", "message": (
                f"still pending in signoff (request {decision.id}): approve it there, "
                "then retry this tool call")})
        return json.dumps({"behavior": "deny", "message": f"not approved: {decision.describe()}"})

    async def _earlier(self, digest: str) -> Decision | None:
        """The request this exact call was left pending on, unless it has lapsed since."""
        earlier = self.left_pending.pop(digest, None)
        if earlier is None:
            return None
        decision = await self.client.status(earlier)
        return None if decision.status in ("expired", "error") else decision

    async def _wait(self, decision: Decision, tool_name: str, ctx: Context | None) -> Decision:
        waited, step = 0.0, 0
        while decision.pending and decision.id is not None and waited < self.wait_limit:
            if ctx is not None:
                step += 1
                await ctx.report_progress(step, None, f"waiting for approval {decision.id} "
                                                      f"of {tool_name}")
            decision = await self.client.wait(decision.id, timeout=self.progress_every)
            waited += self.progress_every
        return decision


def permission_server(prompts: PermissionPrompts) -> MCPServer:
    """The MCP server Claude Code connects to."""
    server = MCPServer("signoff-permission", instructions=(
        "Use the approve tool as --permission-prompt-tool: each prompt is decided by a "
        "person through signoff."))

    @server.tool(name="approve", structured_output=False, description=(
        "Ask signoff whether Claude Code may run a tool call. Answers the JSON "
        '{"behavior": "allow", "updatedInput": ...} or {"behavior": "deny", "message": ...}.'))
    async def approve(tool_name: str, input: dict[str, Any],  # "input": Claude Code's name
                      ctx: Context, tool_use_id: str | None = None) -> str:
        return await prompts.answer(tool_name, input, tool_use_id=tool_use_id, ctx=ctx)

    return server


async def serve_permission(*, url: str | None, api_key: str | None,
                           wait_limit: float = WAIT_LIMIT) -> None:
    """Run on stdin/stdout until Claude Code closes them."""
    requester = f"claude-code@{socket.gethostname()}"
    async with Signoff(url, api_key=api_key, requester=requester) as client:
        prompts = PermissionPrompts(client, cwd=Path.cwd(), wait_limit=wait_limit)
        await permission_server(prompts).run_stdio_async()

