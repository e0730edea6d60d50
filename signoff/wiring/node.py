"""The node: store, tools, policy, engine, worker, decider and the approval flow.

`build_node` builds them in dependency order, each given what it needs at construction
(what `signoff handle` and the embedded Agent run); `signoff.wiring.daemon` adds the
long-running services around it."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from signoff.bot.flow import ApprovalFlow
from signoff.bot.names import Names
from signoff.bot.notify import Notifier, NotifyRule
from signoff.bot.outbox import CardBacklog
from signoff.bot.ports import Surface
from signoff.bot.routing.authorizer import Authorizer
from signoff.bot.routing.oncall import OnCallRouter
from signoff.config.preflight import grant_action
from signoff.config.settings import Settings
from signoff.errors import ConfigError
from signoff.runtime.clock import Clock, SystemClock
from signoff.runtime.decisions import Decider
from signoff.runtime.engine import Engine, EngineConfig
from signoff.runtime.engine.agent import AgentLoop, AgentSettings
from signoff.runtime.events import MultiListener
from signoff.runtime.models import RiskClass, Scope
from signoff.runtime.passkeys import Passkeys, RelyingParty
from signoff.runtime.planning.llm import ChatClient, LlmJudge, LlmPlanner
from signoff.runtime.planning.planner import Planner, Recipe, RulesPlanner
from signoff.runtime.policy.cedar import CedarPolicy
from signoff.runtime.policy.grants import grant_key
from signoff.runtime.policy.net import (
    NetAllow,
    NetRule,
    Resolver,
    SystemResolver,
    origin,
    own_addresses,
)
from signoff.runtime.policy.policy import Policy
from signoff.runtime.policy.quorum import ApprovalRules
from signoff.runtime.policy.unattended import Unattended
from signoff.runtime.schedule.scheduler import Scheduler, schedule_timeouts
from signoff.runtime.signing import node_signer
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import TaskStore
from signoff.runtime.telemetry import Telemetry
from signoff.runtime.tools.base import SmtpSettings, ToolContext
from signoff.runtime.tools.mcp import McpHub, McpServerSpec, McpToolRule
from signoff.runtime.tools.registry import ToolRegistry, builtin_registry
from signoff.runtime.worker import Worker
from signoff.wiring.state import node_id, prepare_state, protected_files
from signoff.wiring.surfaces import SurfacePoster, channel_forms, surface_name


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
    surfaces: dict[str, Surface] = field(default_factory=dict)
    oncall: OnCallRouter | None = None
    scheduler: Scheduler | None = None
    mcp: McpHub = field(default_factory=lambda: McpHub(()))
    telemetry: Telemetry | None = None  # OpenTelemetry, when [telemetry] enabled


def _chat_client(settings: Settings) -> ChatClient | None:
    p = settings.planner
    if not (p.base_url and p.model):
        return None
    return ChatClient(base_url=p.base_url, model=p.model, api_key=p.api_key,
                      timeout=p.timeout.total_seconds())


def build_planner(settings: Settings) -> Planner:
    """Rules planner from [[recipes]], wrapped by the LLM planner in plan mode."""
    recipes = [Recipe(name=r.name, pattern=r.match,
                      steps=tuple((s.tool, dict(s.args)) for s in r.steps))
               for r in settings.recipes]
    rules = RulesPlanner(recipes)
    client = _chat_client(settings)
    if settings.planner.kind == "openai" and not settings.planner.agent and client:
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


def build_tools(settings: Settings, work_dir: Path | None = None
                ) -> tuple[ToolRegistry, McpHub]:
    """Built-ins, plugins and the configured MCP servers' tools (servers not started);
    the servers log into the state dir."""
    wd = settings.resolved_work_dir(work_dir)
    registry = builtin_registry(read_only_commands=settings.policy.read_only_commands,
                                work_dir=wd)
    state = settings.resolved_state_dir(work_dir)
    hub = McpHub(mcp_specs(settings), log_dir=state, cwd=server_dir(wd, state))
    registry.add_source(hub)
    return registry, hub


def server_dir(work_dir: Path, state_dir: Path) -> Path | None:
    """Where stdio MCP servers start: the daemon's working directory (None), unless it
    lies in the work dir (``work_dir = "."``); then the state dir. A server's program looks
    for code and settings where it starts (``python -m`` imports from there first, npx
    reads its ``.npmrc``, uv its ``pyproject.toml``), and the agent writes the work dir
    unattended: a module it wrote there would run as the server at its next start."""
    here = Path.cwd().resolve()
    return state_dir if here.is_relative_to(work_dir.resolve()) else None


def build_registry(settings: Settings, work_dir: Path | None = None) -> ToolRegistry:
    """Every tool a node of these settings offers (also what `signoff.config.preflight` checks)."""
    return build_tools(settings, work_dir)[0]


def build_agent(settings: Settings) -> AgentLoop | None:
    """The agent loop when `[planner] kind = "openai"` runs in agent mode."""
    p = settings.planner
    client = _chat_client(settings)
    if not p.agent or client is None:
        return None
    return AgentLoop(model=client, settings=AgentSettings(
        model=p.model or "", max_turns=p.max_turns, max_actions=p.max_actions,
        on_deny=p.on_deny, system_prompt=p.system_prompt))


def _preauthorized(settings: Settings, registry: ToolRegistry) -> dict[str, frozenset[str]]:
    """Grant keys of each schedule's declared envelope (`[[schedules]] grants`)."""
    out: dict[str, frozenset[str]] = {}
    for i, sched in enumerate(settings.schedules):
        keys = set()
        for j, spec in enumerate(sched.grants):
            try:
                action = grant_action(registry, spec)
            except Exception as exc:
                raise ConfigError(f"schedules[{i}].grants[{j}]: {exc}") from exc
            keys.add(grant_key(sched.name, action))
        out[sched.name] = frozenset(keys)
    return out


def build_policy(settings: Settings, registry: ToolRegistry, net: NetRule,
                 autonomous_risks: Iterable[RiskClass] | None = None) -> Policy:
    """The node's policy (also what `signoff policy test` evaluates against)."""
    pol = settings.policy
    risks = frozenset(autonomous_risks) if autonomous_risks is not None else frozenset(
        settings.approvals.autonomous_risks)
    return Policy(autonomous_risks=risks, prohibit=tuple(pol.prohibit),
                  budgets=dict(pol.budgets), preauthorized=_preauthorized(settings, registry),
                  net=net, cedar=CedarPolicy.load(pol.cedar) if pol.cedar else None)


def net_rule(settings: Settings, resolver: Resolver | None = None) -> NetRule:
    """The policy's network rule: ``policy.net_allow`` and the daemon's own address."""
    d = settings.daemon
    urls = frozenset({origin(str(d.public_url))}) if d.public_url else frozenset()
    return NetRule(allow=NetAllow.parse(settings.policy.net_allow), own_ports=frozenset({d.port}),
                   own_addresses=own_addresses(d.host), own_urls=urls,
                   resolver=resolver or SystemResolver())


def build_node(settings: Settings, *, work_dir: Path | None = None, database: str | None = None,
               autonomous_risks: Iterable[RiskClass] | None = None, clock: Clock | None = None,
               store: TaskStore | None = None, planner: Planner | None = None,
               surfaces: dict[str, Surface] | None = None,
               oncall: Any = None, resolver: Resolver | None = None,
               state: Path | None = None, telemetry: Telemetry | None = None) -> Node:
    """Build the runtime and the approval flow from settings (``resolver``: how network
    tools and the policy resolve host names; the system's by default; ``state``: the
    state dir when the caller prepared it already, see `prepare_state`; ``surfaces``:
    the table the node's parts share, kept as given; ``telemetry``:
    given by tests, else built from ``[telemetry]`` when it is enabled)."""
    wd = settings.resolved_work_dir(work_dir)
    wd.mkdir(parents=True, exist_ok=True)
    state = state or prepare_state(settings, work_dir)
    clock = clock or SystemClock()
    # The one surface table every part reads (the daemon fills it after the node: see
    # `signoff.wiring.daemon.assemble`).
    chosen = surfaces if surfaces is not None else {}
    url = (database or settings.database_url(work_dir)) if store is None else _store_url(store)
    registry, hub = build_tools(settings, wd)
    # After the tools: the plug-ins they loaded are the daemon's code too.
    rule_files = [p for p in (settings.source, settings.policy.cedar) if p is not None]
    protected = protected_files(state, url, config=rule_files, work_dir=wd)
    node = node_id(settings, state)
    signer = node_signer(state, node_id=node)
    store = store or make_store(url or "", signer=signer)
    if store.sealer.signer is None:  # a store built elsewhere signs with this node's key
        store.sealer.signer = signer
    pol = settings.policy
    em = settings.email
    channels = channel_forms()
    net = net_rule(settings, resolver)
    context = ToolContext(
        net=net,
        work_dir=wd, command_timeout=pol.command_timeout.total_seconds(),
        protected=protected, command_env=tuple(settings.tools.run_command.env),
        post_message=SurfacePoster(chosen, channels), channels=channels,
        smtp=SmtpSettings(host=em.host, port=em.port, sender=em.sender, starttls=em.starttls,
                          username=em.username, password=em.password,
                          timeout=em.timeout.total_seconds()))
    ap = settings.approvals
    policy = build_policy(settings, registry, net, autonomous_risks)
    scopes = {risk: tuple(ap.scopes_for(risk)) for risk in RiskClass}
    schedules = [s.to_runtime() for s in settings.schedules]  # converted once, used thrice
    router = OnCallRouter(
        rotations=[r.to_runtime() for r in settings.oncall.rotations],
        overrides=[o.to_runtime() for o in settings.oncall.overrides], clock=clock,
        schedule_approvers={s.name: s.approvers for s in settings.schedules if s.approvers})
    config = EngineConfig(
        node_id=node, approval_timeout=ap.timeout, lease=settings.daemon.lease,
        max_retries=settings.daemon.max_retries, scopes=scopes,
        unattended=Unattended(mode=ap.mode, cron_mode=ap.cron_mode,
                              strict_yolo=settings.evaluation.strict_yolo),
        forbid_self_approval=ap.forbid_self_approval, grant_ttl=ap.grant_ttl,
        people=settings.who_is_who,
        coalesce=ap.coalesce, remember_deny=ap.remember_deny,
        shared_work_dir=settings.daemon.shared_work_dir,
        approvers_for=router.approvers_for,
        rules=ApprovalRules(quorum=dict(pol.quorum), hold=dict(ap.hold)),
        timeout_for=schedule_timeouts(schedules),
        schedule_definitions={s.name: s.definition for s in schedules})
    judge = None
    client = _chat_client(settings)
    if str(ap.mode) == "smart" and client is not None:
        judge = LlmJudge(client=client)
    listener = MultiListener()
    if telemetry is None and settings.telemetry.enabled:
        from signoff.runtime.telemetry import from_environment  # imported only when on

        telemetry = from_environment(store=store, node_id=config.node_id)
    # An injected planner plans every goal itself; otherwise agent mode, when configured,
    # works on goals without steps turn by turn.
    engine = Engine(store=store, registry=registry, policy=policy,
                    planner=planner or build_planner(settings), clock=clock,
                    tool_context=context, config=config, judge=judge, listener=listener,
                    runner=None if planner is not None else build_agent(settings))
    # Made before the worker, the notifier and the outbox, which all share it: the notifier
    # rings it, the outbox counts the card backlog on it, and the worker waits for room on
    # it (approval cards before more autonomous work).
    backlog = CardBacklog()
    worker = Worker(engine=engine, poll_interval=settings.daemon.poll_interval.total_seconds(),
                    gate=backlog.room)
    decider = Decider(engine=engine, on_runnable=worker.hand_over)
    authorizer = Authorizer(approvers=frozenset(ap.approvers), oncall=oncall or router.current)
    rules = [NotifyRule(platform=surface_name(n.platform), channel=n.target,
                        events=frozenset(map(str, n.events)), include_content=n.include_content)
             for n in settings.notify]
    public = settings.daemon.public_url
    names = Names(clock, config.people)  # lines name deciders as cards do
    notifier = Notifier(store=store, clock=clock, rules=rules, console_url=public,
                        on_flush=backlog.ring, names=names.name,
                        outages=engine.outages)  # its loops' failures show in /health
    flow = ApprovalFlow(store=store, decider=decider, clock=clock, surfaces=chosen,
                        authorizer=authorizer, notifier=notifier, console_url=public,
                        step_up=frozenset(ap.step_up),
                        previews=functools.partial(registry.preview, ctx=context),
                        delivered=telemetry.card_delivered if telemetry else None,
                        passkeys=Passkeys(store=store, clock=clock, rp=RelyingParty.of(public),
                                          people=config.people)
                        if ap.step_up_with == "passkey" else None,
                        names=names, backlog=backlog,
                        outages=engine.outages)  # the outbox's outages show in /health
    listener.add(flow)
    if telemetry is not None:
        listener.add(telemetry)
    # Built here so that a schedule naming an unknown tool is a config error at start.
    scheduler = Scheduler(engine=engine, schedules=schedules, clock=clock,
                          wake=worker.wake)
    return Node(settings=settings, work_dir=wd, store=store, registry=registry, engine=engine,
                decider=decider, worker=worker, flow=flow, authorizer=authorizer, clock=clock,
                listener=listener, surfaces=chosen, oncall=router, scheduler=scheduler,
                mcp=hub, telemetry=telemetry)


def _store_url(store: TaskStore) -> str | None:
    """The database URL of a store built elsewhere (tests, embedding), if it has one."""
    from signoff.runtime.store.sql.store import SqlTaskStore

    return store.url if isinstance(store, SqlTaskStore) else None


def allowed_scope_names(scopes: Iterable[Scope]) -> list[str]:
    """For help texts."""
    return [s.value for s in scopes]


def load_node(config: str | Path | None, *, chat: bool = True) -> Node:
    """A node for CLI commands that work on the daemon's database directly
    (``chat=False``: see `signoff.config.settings.load_settings`)."""
    from signoff.config.settings import load_settings

    settings = load_settings(config, chat=chat) if config else Settings.default()
    return build_node(settings)
