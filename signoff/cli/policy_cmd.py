"""`signoff policy test`: what the policy (built-in rules, then the Cedar file) says about
one action, and which policies said it — before an agent ever asks.

The action is prepared by the tool registry exactly as the daemon prepares it (risk,
capability, targets) and judged by the node's own `Policy` (`signoff.wiring.build_policy`),
against an empty store: live grants and spent budgets of the running daemon are not
consulted, and the output says so. A requester ``schedule:<name>`` is judged as that
schedule's run (its pre-authorized grants apply); any other is the principal Cedar sees.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from signoff.cli.app import ConfigOpt, fail, load
from signoff.errors import SignoffError

NOTE = "evaluated without the daemon's live grants or spent budgets"


def _args(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"--args is not JSON: {exc.msg} (at character {exc.pos})")
    if not isinstance(value, dict):
        fail('--args must be a JSON object, e.g. \'{"to": "bob@example.com"}\'')
    return value


async def evaluate(settings: Any, tool: str, args: dict[str, Any], *, requester: str,
                   policy_id: str | None) -> dict[str, Any]:
    """The verdict as a dict: decision, reason, policies and the action as judged."""
    from signoff.runtime.clock import SystemClock
    from signoff.runtime.models import Action, Task
    from signoff.runtime.store.memory import MemTaskStore
    from signoff.wiring import build_policy, build_tools, net_rule

    registry, hub = build_tools(settings)
    if "." in tool:  # an MCP tool: its server must be up to know the tool
        await hub.start()
    try:
        action = registry.prepare(Action(tool=tool, args=args))
        policy = build_policy(settings, registry, net_rule(settings))
        schedule = requester.removeprefix("schedule:") if requester.startswith(
            "schedule:") else None
        task = Task(id=policy_id or "t-policy-test", goal="signoff policy test",
                    schedule=schedule, submitted_by=None if schedule else requester)
        ev = await policy.evaluate(task, action, MemTaskStore(), now=SystemClock().now())
    finally:
        await hub.stop()
    judged = ev.action or action
    return {"decision": ev.verdict.value, "reason": ev.reason, "policies": list(ev.policies),
            "tool": judged.tool, "risk": judged.risk.value if judged.risk else None,
            "capability": judged.capability, "targets": list(judged.targets), "note": NOTE}


def cmd_policy_test(
    tool: Annotated[str, typer.Option("--tool", help="The tool's name, as an agent names it.")],
    args: Annotated[str, typer.Option("--args", help="Its arguments as a JSON object.")] = "{}",
    requester: Annotated[str, typer.Option(
        "--requester", help="Who asks: web:alice, schedule:<name>, a chat account…")] = "",
    policy_id: Annotated[str | None, typer.Option(
        "--policy-id", help="The policy_id the request is asked under.")] = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Print the decision (ALLOW, ASK_USER or BLOCK) for one action and the policies that
    made it."""
    settings = load(config)
    try:
        found = asyncio.run(evaluate(settings, tool, _args(args), requester=requester,
                                     policy_id=policy_id))
    except SignoffError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    typer.echo(f"decision: {found['decision']}")
    typer.echo(f"reason:   {found['reason']}")
    typer.echo(f"policies: {', '.join(found['policies']) or '(none: the built-in rules)'}")
    targets = ", ".join(found["targets"]) or "(none)"
    typer.echo(f"action:   {found['tool']} ({found['risk'] or '?'}, "
               f"{found['capability'] or '?'}) targets: {targets}")
    typer.echo(f"note:     {NOTE}")


def register(app: typer.Typer) -> None:
    """Add `signoff policy test` to the app."""
    policy_app = typer.Typer(no_args_is_help=True,
                             help="Try the policy (and its Cedar file) on an action.")
    policy_app.command("test")(cmd_policy_test)
    app.add_typer(policy_app, name="policy")

