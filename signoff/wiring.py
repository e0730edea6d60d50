"""The one place that reads settings and builds a signoff node from them.

Everything else takes keyword-only constructor arguments; only this module knows which
setting goes where. `build_node` gives the runtime + approval flow (what `signoff
handle` needs); `signoff.cli.daemon.assemble` adds the long-running services around it
(HTTP server, chat surfaces, outbox, scheduler).
"""

from __future__ import annotations

import hashlib
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.bot.flow import ApprovalFlow
from signoff.bot.notify import Notifier, NotifyRule
from signoff.bot.ports import ChatPlatform
from signoff.bot.routing.authorizer import Authorizer
from signoff.bot.routing.oncall import OnCallRouter
from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.runtime.clock import Clock, SystemClock
from signoff.runtime.decisions import Decider
from signoff.runtime.engine import Engine, EngineConfig
from signoff.runtime.events import MultiListener
from signoff.runtime.models import Action, RiskClass, Scope
from signoff.runtime.planning.llm import ChatClient, LlmJudge, LlmPlanner
from signoff.runtime.planning.planner import Planner, Recipe, RulesPlanner
from signoff.runtime.policy.grants import grant_key
from signoff.runtime.policy.policy import Policy
from signoff.runtime.policy.unattended import Unattended
from signoff.runtime.schedule.scheduler import Scheduler, schedule_timeouts
from signoff.runtime.store.port import TaskStore
from signoff.runtime.store.sql.store import SqlTaskStore
from signoff.runtime.tools.base import SmtpSettings, ToolContext
from signoff.runtime.tools.mcp import McpHub, McpServerSpec, McpToolRule
from signoff.runtime.tools.registry import ToolRegistry, builtin_registry, fingerprint
from signoff.runtime.worker import Worker

if TYPE_CHECKING:
    from signoff.api.context import ApiContext

log = logging.getLogger(__name__)


@dataclass
class Node:
    """A fully built signoff node (not yet running)."""

    settings: Settings
    work_dir: Path
    store: TaskStore
    registry: ToolRegistry
    engine: Engine
    decider: Decider
    worker: Worker
    flow: ApprovalFlow
    authorizer: Authorizer
    clock: Clock
    listener: MultiListener
    platforms: dict[str, ChatPlatform] = field(default_factory=dict)
    oncall: OnCallRouter | None = None
    scheduler: Scheduler | None = None
    mcp: McpHub = field(default_factory=lambda: McpHub(()))


def node_id(settings: Settings, work_dir: Path) -> str:
    """Stable across restarts of the same daemon, distinct between daemons sharing a DB."""
    if settings.daemon.node_id:
        return settings.daemon.node_id
    digest = hashlib.sha256(str(work_dir).encode()).hexdigest()[:8]
    return f"{socket.gethostname()}-{digest}"


def build_planner(settings: Settings) -> Planner:
    """Rules planner from [[recipes]], wrapped by the LLM planner when configured."""
    recipes = [Recipe(name=r.name, pattern=r.match,
                      steps=tuple((s.tool, dict(s.args)) for s in r.steps))
               for r in settings.recipes]
    rules = RulesPlanner(recipes)
    p = settings.planner
    if p.kind == "openai" and p.base_url and p.model:
        client = ChatClient(base_url=p.base_url, model=p.model, api_key=p.api_key,
                            timeout=p.timeout.total_seconds())
        return LlmPlanner(client=client, fallback=rules)
    return rules


def mcp_specs(settings: Settings) -> list[McpServerSpec]:
    """The runtime's plain view of ``[[mcp.servers]]``."""
    return [
        McpServerSpec(
            name=s.name, command=tuple(s.command or ()), url=s.url, env=dict(s.env),
            default_risk=s.default_risk, trust_annotations=s.trust_annotations,
            call_timeout=s.timeout.total_seconds(),
            connect_timeout=s.connect_timeout.total_seconds(),
            tools={name: McpToolRule(risk=t.risk, capability=t.capability,
                                     targets=tuple(t.targets), content=tuple(t.content))
                   for name, t in s.tools.items()})
        for s in settings.mcp.servers]


def build_tools(settings: Settings, work_dir: Path) -> tuple[ToolRegistry, McpHub]:
    """Built-ins, plugins and the configured MCP servers' tools (servers not started)."""
    registry = builtin_registry(read_only_commands=settings.policy.read_only_commands,
                                work_dir=work_dir)
    hub = McpHub(mcp_specs(settings), log_dir=work_dir)
    registry.add_source(hub)
    return registry, hub


def _preauthorized(settings: Settings, registry: ToolRegistry) -> dict[str, frozenset[str]]:
    """Grant keys of each schedule's declared envelope (`[[schedules]] grants`)."""
    out: dict[str, frozenset[str]] = {}
    for i, sched in enumerate(settings.schedules):
        keys = set()
        for j, spec in enumerate(sched.grants):
            args = {k: v for k, v in spec.items() if k != "tool"}
            try:
                tool = registry.get(str(spec.get("tool")))
                known = {p.name for p in tool.params}
                unknown = sorted(set(args) - known)
                if unknown and known:  # no params: an MCP tool whose server has not answered
                    raise ConfigError(f"{tool.name} has no argument {', '.join(unknown)} "
                                      f"(it takes {', '.join(sorted(known))})")
                # Only the fingerprint matters here: content arguments (subject, body) are
                # neither needed nor part of it, so required-argument checks do not apply.
                risk = tool.risk_for(args)
                action = Action(tool=tool.name, args=args, risk=risk,
                                capability=tool.capability, fingerprint=fingerprint(tool, args))
            except Exception as exc:
                raise ConfigError(f"schedules[{i}].grants[{j}]: {exc}") from exc
            keys.add(grant_key(sched.name, action))
        out[sched.name] = frozenset(keys)
    return out


def build_node(settings: Settings, *, work_dir: Path | None = None, database: str | None = None,
               autonomous_risks: Iterable[RiskClass] | None = None, clock: Clock | None = None,
               store: TaskStore | None = None, planner: Planner | None = None,
               platforms: dict[str, ChatPlatform] | None = None,
               oncall: Any = None) -> Node:
    """Build the runtime and the approval flow from settings."""
    wd = settings.resolved_work_dir(work_dir)
    wd.mkdir(parents=True, exist_ok=True)
    clock = clock or SystemClock()
    store = store or SqlTaskStore(url=database or settings.database_url(work_dir))
    pol = settings.policy
    registry, hub = build_tools(settings, wd)
    em = settings.email
    context = ToolContext(
        work_dir=wd, command_timeout=pol.command_timeout.total_seconds(),
        smtp=SmtpSettings(host=em.host, port=em.port, sender=em.sender, starttls=em.starttls,
                          username=em.username, password=em.password,
                          timeout=em.timeout.total_seconds()))
    ap = settings.approvals
    risks = frozenset(autonomous_risks) if autonomous_risks is not None else frozenset(
        ap.autonomous_risks)
    policy = Policy(autonomous_risks=risks, prohibit=tuple(pol.prohibit),
                    budgets=dict(pol.budgets), preauthorized=_preauthorized(settings, registry))
    scopes = {risk: tuple(ap.scopes_for(risk)) for risk in RiskClass}
    router = OnCallRouter(
        rotations=settings.oncall.rotations, overrides=settings.oncall.overrides, clock=clock,
        schedule_approvers={s.name: s.approvers for s in settings.schedules if s.approvers})
    config = EngineConfig(
        node_id=node_id(settings, wd), approval_timeout=ap.timeout, lease=settings.daemon.lease,
        max_retries=settings.daemon.max_retries, scopes=scopes,
        unattended=Unattended(mode=ap.mode, cron_mode=ap.cron_mode,
                              strict_yolo=settings.evaluation.strict_yolo),
        forbid_self_approval=ap.forbid_self_approval, approvers_for=router.approvers_for,
        timeout_for=schedule_timeouts(settings.schedules))
    judge = None
    if str(ap.mode) == "smart" and settings.planner.base_url and settings.planner.model:
        judge = LlmJudge(client=ChatClient(
            base_url=settings.planner.base_url, model=settings.planner.model,
            api_key=settings.planner.api_key, timeout=settings.planner.timeout.total_seconds()))
    listener = MultiListener()
    engine = Engine(store=store, registry=registry, policy=policy,
                    planner=planner or build_planner(settings), clock=clock,
                    tool_context=context, config=config, judge=judge, listener=listener)
    worker = Worker(engine=engine)
    decider = Decider(engine=engine, on_runnable=worker.hand_over)
    authorizer = Authorizer(approvers=frozenset(ap.approvers), oncall=oncall or router.current)
    chosen = dict(platforms or {})
    rules = [NotifyRule(platform=n.platform, channel=n.target, events=frozenset(map(str, n.events)),
                        include_content=n.include_content) for n in settings.notify]
    public = settings.daemon.public_url
    notifier = Notifier(store=store, clock=clock, rules=rules, console_url=public)
    flow = ApprovalFlow(store=store, decider=decider, clock=clock, platforms=chosen,
                        authorizer=authorizer, notifier=notifier, console_url=public)
    notifier.on_flush = flow.dispatcher.wake
    listener.add(flow)
    # Built here so that a schedule naming an unknown tool is a config error at start.
    scheduler = Scheduler(engine=engine, schedules=settings.schedules, clock=clock,
                          wake=worker.wake)
    return Node(settings=settings, work_dir=wd, store=store, registry=registry, engine=engine,
                decider=decider, worker=worker, flow=flow, authorizer=authorizer, clock=clock,
                listener=listener, platforms=chosen, oncall=router, scheduler=scheduler,
                mcp=hub)


def allowed_scope_names(scopes: Iterable[Scope]) -> list[str]:
    """For help texts."""
    return [s.value for s in scopes]


class PendingCards:
    """Late-bound `/pending` lister for chat surfaces built before the node."""

    def __init__(self) -> None:
        self.node: Node | None = None

    async def __call__(self) -> list[Any]:
        from signoff.bot.cards import build_card

        if self.node is None:
            return []
        page = await self.node.store.pending_requests(limit=20)
        url = self.node.settings.daemon.public_url
        return [build_card(r.task, r.approval, console_url=url) for r in page.items]


def chat_platforms(settings: Settings, *, node_pending: PendingCards | None
                   ) -> dict[str, ChatPlatform]:
    """Slack and Telegram surfaces for the configured sections (SDKs imported lazily)."""
    out: dict[str, ChatPlatform] = {}
    if settings.slack is not None:
        from signoff.adapters.slack.platform import SlackPlatform

        s = settings.slack
        out["slack"] = SlackPlatform(bot_token=s.bot_token, channel=s.channel, mode=str(s.mode),
                                     app_token=s.app_token, signing_secret=s.signing_secret,
                                     api_url=s.api_url)
    if settings.telegram is not None:
        from signoff.adapters.telegram.platform import TelegramPlatform

        t = settings.telegram
        out["telegram"] = TelegramPlatform(
            bot_token=t.bot_token, chat_id=t.chat_id,
            mode="webhook" if str(t.mode) == "webhook" else "polling", base_url=t.base_url,
            base_file_url=t.base_file_url, webhook_secret=t.webhook_secret,
            webhook_url=t.webhook_url, pending_lister=node_pending)
    return out


def load_node(config: str | Path | None) -> Node:
    """A node for CLI commands that work on the daemon's database directly."""
    from signoff.config.settings import load_settings

    settings = load_settings(config) if config else Settings.default()
    return build_node(settings)


def api_providers(node: Node) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """(schedules provider, on-call provider, extra services) for the daemon."""
    from signoff.bot.routing.escalation import Escalator

    assert node.scheduler is not None and node.oncall is not None
    scheduler, router = node.scheduler, node.oncall
    escalator = Escalator(store=node.store, clock=node.clock, rotations=router.rotations,
                          overrides=router.overrides, listener=node.listener,
                          wake=node.flow.dispatcher.wake)

    async def schedules() -> list[dict[str, Any]]:
        return await scheduler.status()

    async def oncall(at: datetime | None) -> dict[str, Any]:
        return router.describe(at)

    services: list[tuple[str, Any]] = [("scheduler", scheduler.run),
                                       ("escalation", escalator.run)]
    if node.flow.notifier is not None:
        services.append(("notify", node.flow.notifier.run))
        if any("audit_head" in r.events for r in node.flow.notifier.rules):
            services.append(("audit-head", node.flow.notifier.run_audit_head))
    return schedules, oncall, services


def api_keys(settings: Settings) -> dict[str, str]:
    """API key → actor name: ``admin`` for ``api.key``, each ``[[api.keys]]`` by its name."""
    from signoff.api.context import ADMIN

    keys: dict[str, str] = {}
    if settings.api.key:
        keys[settings.api.key] = ADMIN
    for entry in settings.api.keys:
        keys.setdefault(entry.key, entry.name)
    return keys


def api_context(settings: Settings, **parts: Any) -> ApiContext:
    """The API's context from the config file: ``keys``, ``local_no_key`` (no key on a
    loopback host) and ``public_url`` filled in unless given; the rest from ``parts``."""
    from signoff.api.context import ApiContext, is_loopback

    keys = api_keys(settings)
    parts.setdefault("keys", keys)
    parts.setdefault("local_no_key", not keys and is_loopback(settings.daemon.host))
    parts.setdefault("public_url", settings.daemon.public_url)
    return ApiContext(**parts)
