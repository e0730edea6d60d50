"""`signoff mcp-permission`: Claude Code's permission prompts as signoff approvals.

An MCP server on stdio (the SDK's `MCPServer`) with one tool, ``approve(tool_name,
input)``, in the shape ``claude --permission-prompt-tool`` expects: the answer is the JSON
text ``{"behavior": "allow", "updatedInput": input}`` or ``{"behavior": "deny",
"message": …}``. Each prompt becomes a request to the running daemon (``POST
/v1/approvals``; policy_id = this server's session, i.e. one Claude Code session), so it
is decided by the same policy and by a person on any surface, a phone included.

Claude Code's tools are labelled by :data:`CLAUDE_TOOLS` (the README has the table) and
sent as ``claude.<Tool>``: the risk, capability, which arguments are the targets and which
are content (kept out of the fingerprint, so a Session grant for ``Edit`` of one file
covers the next edit of that file). File writes inside the project (this process's
working directory) are DRAFT, as signoff's own ``write_file``; elsewhere DESTRUCTIVE.
``Bash`` is sent as signoff's own ``run_command`` (the exact command and the project as
cwd), so ``policy.read_only_commands`` apply; ``mcp__<server>__<tool>`` is sent as
``<server>.<tool>``, labelled by the daemon's ``[[mcp.servers]]`` when it has that server
(else DESTRUCTIVE). Every failure (daemon down, bad key, expiry) is a deny: fail closed.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from signoff.cli.gate import GRACE, PROGRESS_EVERY
from signoff.client import Decision, Signoff

# The daemon expires every request (its approvals.timeout, at most 7 days): wait for that.
WAIT_LIMIT = 7 * 24 * 3600.0 + GRACE


@dataclass(frozen=True)
class Label:
    """How one Claude Code tool is asked about."""

    risk: str
    capability: str
    targets: tuple[str, ...] = ()
    content: tuple[str, ...] = ()
    write: bool = False  # a file write: DRAFT inside the project, DESTRUCTIVE outside


CLAUDE_TOOLS: dict[str, Label] = {
    "Write": Label("DESTRUCTIVE", "fs.write", ("file_path",), ("content",), write=True),
    "Edit": Label("DESTRUCTIVE", "fs.write", ("file_path",),
                  ("old_string", "new_string", "replace_all"), write=True),
    "MultiEdit": Label("DESTRUCTIVE", "fs.write", ("file_path",), ("edits",), write=True),
    "NotebookEdit": Label("DESTRUCTIVE", "fs.write", ("notebook_path",),
                          ("new_source", "cell_id", "cell_type", "edit_mode"), write=True),
    "Read": Label("READ", "fs.read", ("file_path",), ("offset", "limit")),
    "Glob": Label("READ", "fs.read", ("path", "pattern")),
    "Grep": Label("READ", "fs.read", ("path", "pattern")),
    "LS": Label("READ", "fs.read", ("path",)),
    "WebFetch": Label("READ", "net.fetch", ("url",), ("prompt",)),
    "WebSearch": Label("READ", "net.search", ("query",)),
    "TodoWrite": Label("READ", "agent.todo", (), ("todos",)),
    "Task": Label("READ", "agent.task", ("subagent_type",), ("description", "prompt")),
}


def label_for(tool_name: str) -> Label:
    """The label of a Claude Code tool; ``mcp__<server>__<tool>`` and unknown tools are
    DESTRUCTIVE with every argument in the fingerprint."""
    if tool_name in CLAUDE_TOOLS:
        return CLAUDE_TOOLS[tool_name]
    if tool_name.startswith("mcp__"):
        server = tool_name.split("__")[1] if tool_name.count("__") >= 2 else "unknown"
        return Label("DESTRUCTIVE", f"mcp.{server}")
    return Label("DESTRUCTIVE", f"claude.{tool_name}")


def request_for(tool_name: str, args: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """What the daemon is asked for one prompt: tool, args and (for tools it does not
    know) risk, capability, targets and content."""
    if tool_name == "Bash":  # the daemon's run_command rules: exact command + cwd
        return {"tool": "run_command",
                "args": {"command": str(args.get("command", "")), "cwd": str(cwd)}}
    label = label_for(tool_name)
    targets = [str(args[key]) for key in label.targets if args.get(key) not in (None, "")]
    risk = label.risk
    if label.write and targets and _inside(cwd, targets[0]):
        risk = "DRAFT"
    name = f"claude.{tool_name}"
    if tool_name.startswith("mcp__") and tool_name.count("__") >= 2:
        server, tool = tool_name.removeprefix("mcp__").split("__", 1)
        name = f"{server}.{tool}"
    return {"tool": name, "args": args, "risk": risk, "capability": label.capability,
            "targets": targets, "content": list(label.content)}


def _inside(cwd: Path, path: str) -> bool:
    real = Path(os.path.normpath(cwd / path))
    return real.is_relative_to(os.path.normpath(cwd))


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

