"""`signoff mcp-gate`, `signoff mcp-permission` and `signoff claude-hook`: their command
lines, and nothing else.

Both serve MCP on stdio through the SDK, whose import alone takes most of a second. The
commands are defined here and load their servers (`signoff.cli.gate`,
`signoff.cli.permission`) only when run, so that every other command — `signoff --help`
included — starts without the MCP SDK.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from signoff.cli.app import ConfigOpt, fail, load, setup_logging
from signoff.errors import SignoffError

UrlOpt = Annotated[str | None, typer.Option(envvar="SIGNOFF_URL",
                                            help="The daemon (default http://127.0.0.1:8080).")]
KeyOpt = Annotated[str | None, typer.Option(envvar="SIGNOFF_API_KEY", help="The daemon's API key.")]


def cmd_mcp_gate(
    server: Annotated[str, typer.Argument(
        metavar="SERVER", help="The name of the mcp.servers entry to put behind approvals.")],
    config: ConfigOpt = None,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    policy_id: Annotated[str | None, typer.Option(
        "--policy-id", help="What session and always answers cover, for every client "
                            "(default: on stdio mcp-gate:SERVER:<client name>, stable across "
                            "restarts; over HTTP mcp-gate:SERVER:session:<session id>, "
                            "each client session its own).")] = None,
    http: Annotated[bool, typer.Option(
        "--http", help="Serve MCP over streamable HTTP at http://HOST:PORT/mcp instead of "
                       "stdio.")] = False,
    host: Annotated[str, typer.Option(
        "--host", help="With --http: the loopback address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        "--port", min=1, max=65535, help="With --http: the port to listen on.")] = 8765,
) -> None:
    """Serve MCP (stdio, or --http): SERVER's tools, each call approved through the running
    daemon; its prompts and resources passed through read-only."""
    from signoff.cli.gate import GRACE, HttpAddress, serve_gate
    from signoff.runtime.tools.mcp.connection import McpConnection
    from signoff.wiring import mcp_specs

    setup_logging("WARNING")  # stderr: stdout carries the MCP protocol
    settings = load(config)
    specs = {spec.name: spec for spec in mcp_specs(settings)}
    if server not in specs:
        known = ", ".join(specs) or "none"
        fail(f"no [[mcp.servers]] entry named {server!r} (configured: {known})")
    upstream = McpConnection(specs[server], log_dir=settings.resolved_state_dir())
    limit = settings.approvals.timeout.total_seconds() + GRACE
    try:
        address = HttpAddress(host=host, port=port) if http else None
        asyncio.run(serve_gate(upstream, url=url, api_key=api_key, wait_limit=limit,
                               policy_id=policy_id, http=address))
    except SignoffError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def cmd_mcp_permission(
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    wait: Annotated[str, typer.Option(
        help="How long one prompt waits for a person before answering \"still pending, "
             "retry\" (Claude Code gives up after about five minutes).")] = "4m30s",
) -> None:
    """Serve MCP on stdio for Claude Code's --permission-prompt-tool: each prompt is
    decided through the running daemon."""
    from signoff.cli.permission import serve_permission

    setup_logging("WARNING")  # stderr: stdout carries the MCP protocol
    seconds = _seconds("--wait", wait)
    try:
        asyncio.run(serve_permission(url=url, api_key=api_key, wait_limit=seconds))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def cmd_claude_hook(
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    wait: Annotated[str, typer.Option(
        help="The longest the hook takes, asking and waiting for a person included; "
             "still pending then, it answers deny (keep it below the hook's timeout in "
             "Claude Code's settings, about a minute).")] = "50s",
) -> None:
    """Claude Code's PreToolUse hook: read the call on stdin, print allow or deny.

    A call the policy or a grant settles is answered at once; otherwise a person is asked
    and waited for, the whole hook taking at most --wait; still pending then, the answer
    is deny, and the same call made again later lands on the same request. The daemon
    unreachable or too slow is a deny, never an allow."""
    from signoff.cli.claude_hook import main as hook_main

    hook_main(url=url, api_key=api_key, wait=_seconds("--wait", wait))


def _seconds(option: str, text: str) -> float:
    """A duration option in seconds, or one clear error naming the option."""
    from signoff.runtime.schedule.durations import parse_duration

    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        fail(f"{option}: {exc}")


def register(app: typer.Typer) -> None:
    """Add `signoff mcp-gate`, `signoff mcp-permission` and `signoff claude-hook`."""
    app.command("mcp-gate")(cmd_mcp_gate)
    app.command("mcp-permission")(cmd_mcp_permission)
    app.command("claude-hook")(cmd_claude_hook)
