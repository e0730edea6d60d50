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

from signoff.cli.claude_tools import ask_for
from signoff.cli.gate import GRACE, PROGRESS_EVERY
from signoff.client import Decision, Signoff

# The daemon expires every request (its approvals.timeout, at most 7 days): wait for that.
WAIT_LIMIT = 7 * 24 * 3600.0 + GRACE


def request_for(tool_name: str, args: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """What the daemon is asked for one prompt (`claude_tools.ask_for`, as keywords)."""
    return ask_for(tool_name, args, cwd).request()


class PermissionPrompts:
    """Turns each prompt into a request and its decision into Claude Code's answer."""

    def __init__(self, client: Signoff, *, cwd: Path, wait_limit: float = WAIT_LIMIT,
                 progress_every: float = PROGRESS_EVERY) -> None:
        self.client = client
        self.cwd = cwd
        self.wait_limit = wait_limit
        self.progress_every = progress_every
        self.policy_id = f"claude-code:{uuid.uuid4().hex[:12]}"

    async def answer(self, tool_name: str, args: dict[str, Any], *,
                     tool_use_id: str | None = None, ctx: Context | None = None) -> str:
        """The JSON text Claude Code reads: allow with the input unchanged, or deny."""
        asked = request_for(tool_name, args, self.cwd)
        key = f"{self.policy_id}:{tool_use_id}" if tool_use_id else None
        decision = await self.client.request(
            policy_id=self.policy_id, idempotency_key=key,
            goal=f"Claude Code wants to use {tool_name} in {self.cwd}", wait=False, **asked)
        decision = await self._wait(decision, tool_name, ctx)
        if decision.approved:
            return json.dumps({"behavior": "allow", "updatedInput": args})
        return json.dumps({"behavior": "deny", "message": f"not approved: {decision.describe()}"})

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


async def serve_permission(*, url: str | None, api_key: str | None) -> None:
    """Run on stdin/stdout until Claude Code closes them."""
    requester = f"claude-code@{socket.gethostname()}"
    async with Signoff(url, api_key=api_key, requester=requester) as client:
        prompts = PermissionPrompts(client, cwd=Path.cwd())
        await permission_server(prompts).run_stdio_async()

