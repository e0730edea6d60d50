"""The one place that reads settings and builds a signoff node from them.

Everything else takes keyword-only constructor arguments; only this module knows which
setting goes where. `build_node` gives the runtime + approval flow (what `signoff
handle` needs); `signoff.cli.daemon.assemble` adds the long-running services around it
(HTTP server, chat surfaces, outbox, scheduler).
"""

from __future__ import annotations

import functools
import logging
import secrets
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.bot.flow import ApprovalFlow
from signoff.bot.notify import Notifier, NotifyRule
from signoff.bot.plugins import SurfaceRegistry, surface_registry
from signoff.bot.ports import ApprovalCard, CardRef, PostedCard, Surface, SurfaceDeps
from signoff.bot.routing.authorizer import Authorizer
from signoff.bot.routing.oncall import OnCallRouter
from signoff.config.preflight import grant_action
from signoff.config.settings import Settings
from signoff.errors import ConfigError, PlatformUnavailable
from signoff.runtime.clock import Clock, SystemClock
from signoff.runtime.decisions import Decider
from signoff.runtime.engine import Engine, EngineConfig
from signoff.runtime.engine.agent import AgentLoop, AgentSettings
from signoff.runtime.events import MultiListener
from signoff.runtime.leadership import Leadership
from signoff.runtime.models import RiskClass, Scope
from signoff.runtime.outages import Outages
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
from signoff.runtime.replay import ReplayLedger
from signoff.runtime.schedule.scheduler import Scheduler, schedule_timeouts
from signoff.runtime.signing import node_signer
from signoff.runtime.state import (
    NODE_ID_FILE,
    ProtectedFiles,
    create_private_file,
    ensure_private_dir,
    migrate_layout,
    prepare_sqlite_file,
)
from signoff.runtime.store.factory import make_store
from signoff.runtime.store.port import PushSubscription, TaskStore
from signoff.runtime.store.sqlite.store import sqlite_path
from signoff.runtime.telemetry import Telemetry
from signoff.runtime.tools.base import ChannelForm, SmtpSettings, ToolContext
from signoff.runtime.tools.builtin.messaging import parse_channel
from signoff.runtime.tools.mcp import McpHub, McpServerSpec, McpToolRule
from signoff.runtime.tools.registry import ToolRegistry, builtin_registry
from signoff.runtime.worker import Worker

if TYPE_CHECKING:
    from signoff.api.context import ApiContext
    from signoff.bot.routing.reminders import Reminder

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
    surfaces: dict[str, Surface] = field(default_factory=dict)
    oncall: OnCallRouter | None = None
    scheduler: Scheduler | None = None
    mcp: McpHub = field(default_factory=lambda: McpHub(()))
    telemetry: Telemetry | None = None  # OpenTelemetry, when [telemetry] enabled


def prepare_state(settings: Settings, work_dir: Path | None = None) -> Path:
    """The state dir, created 0700, with a 0.2 layout's files moved in from the work dir
    (once, logged). ConfigError when it lies inside the work dir."""
    state = settings.resolved_state_dir(work_dir)
    ensure_private_dir(state)
    wd = settings.resolved_work_dir(work_dir)
    moved, left = migrate_layout(wd, state, database_default=settings.daemon.database is None)
    if moved:
        log.warning(f"state_moved from={wd} to={state} files={','.join(moved)} (the daemon's "
                    f"own files no longer live in the work dir, where the tools could reach "
                    f"them)")
    if left:
        log.warning(f"state_not_moved dir={wd} files={','.join(left)} (the state dir {state} "
                    f"has its own; these old copies are not used, and the tools can read "
                    f"them: delete them)")
    return state


def protected_files(state_dir: Path, database: str | None) -> ProtectedFiles:
    """What the file tools refuse: the state dir, and the SQLite file wherever it is
    (created 0600 first when it is not there yet)."""
    path = sqlite_path(database) if database else None
    db = Path(path) if path else None
    if db is not None:
        prepare_sqlite_file(db)
        mode = db.stat().st_mode & 0o777
        if mode & 0o077:  # a file of the user's own, not ours to change: say so
            log.warning(f"database_readable_by_others path={db} mode={oct(mode)} (chmod 600 "
                        f"it: it holds the audit log and every pending request)")
    return ProtectedFiles.of(state_dir=state_dir, database=db)


def node_id(settings: Settings, state_dir: Path) -> str:
    """``daemon.node_id``, else the host name + a short random suffix.

    The suffix is drawn once and kept in ``<state_dir>/node-id``: distinct between daemons
    sharing a database (each has its own state dir), and stable across restarts, so that a
    restarted daemon takes its own interrupted claims back at once instead of waiting for
    their leases to run out.
    """
    if settings.daemon.node_id:
        return settings.daemon.node_id
    return f"{socket.gethostname()}-{_node_suffix(state_dir / NODE_ID_FILE)}"


def _node_suffix(path: Path) -> str:
    try:
        kept = path.read_text().strip()
    except FileNotFoundError:
        kept = ""
    except OSError as exc:
        raise ConfigError(f"cannot read the node id in {path}: {exc}") from exc
    if kept:
        return kept
    suffix = secrets.token_hex(3)
    try:
        if not create_private_file(path, (suffix + "\n").encode()):
            # another process on this state dir wrote it first
            return path.read_text().strip() or suffix
    except OSError as exc:
        raise ConfigError(f"cannot keep the node id in {path}: {exc}") from exc
    return suffix


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
    registry = builtin_registry(read_only_commands=settings.policy.read_only_commands,
                                work_dir=settings.resolved_work_dir(work_dir))
    hub = McpHub(mcp_specs(settings), log_dir=settings.resolved_state_dir(work_dir))
    registry.add_source(hub)
    return registry, hub


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


class SurfacePoster:
    """`post_message`'s port: ``slack:C1`` / ``telegram:-100`` go to that surface's notify.

    A channel's prefix names its surface through the plug-ins (`surface_name`). It reads
    the node's live surface table, so a surface the daemon disabled at start-up is
    reported unreachable instead of failing after somebody approved the post.
    """

    def __init__(self, surfaces: Mapping[str, Surface],
                 channels: tuple[ChannelForm, ...]) -> None:
        self.surfaces = surfaces
        self.channels = channels

    def unreachable(self, channel: str) -> str | None:
        """Why ``channel``'s surface cannot be used in this process, or None."""
        surface = surface_name(parse_channel(channel, self.channels)[0])
        if surface in self.surfaces:
            return None
        return (f"no {surface} surface is running in this process (it needs [{surface}] in "
                "the config; `signoff handle` has only the terminal)")

    async def post(self, channel: str, text: str) -> None:
        """Post through the surface's own notify (its escaping, limits and errors)."""
        prefix, target = parse_channel(channel, self.channels)
        await self.surfaces[surface_name(prefix)].notify(target, text)


def channel_forms(registry: SurfaceRegistry | None = None) -> tuple[ChannelForm, ...]:
    """How each installed surface writes its channels, for `post_message`."""
    return tuple(ChannelForm(prefix=p.channel_prefix, pattern=p.channel_id,
                             expected=p.channel_example or f"'{p.channel_prefix}:<id>'",
                             kind=p.channel_kind or f"a channel id for {p.channel_prefix}")
                 for p in (registry or surface_registry()).plugins.values()
                 if p.channel_prefix is not None)


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
    state dir when the caller prepared it already, see `prepare_state`; ``telemetry``:
    given by tests, else built from ``[telemetry]`` when it is enabled)."""
    wd = settings.resolved_work_dir(work_dir)
    wd.mkdir(parents=True, exist_ok=True)
    state = state or prepare_state(settings, work_dir)
    clock = clock or SystemClock()
    chosen = dict(surfaces or {})
    url = (database or settings.database_url(work_dir)) if store is None else _store_url(store)
    protected = protected_files(state, url)
    node = node_id(settings, state)
    signer = node_signer(state, node_id=node)
    store = store or make_store(url or "", signer=signer)
    if store.sealer.signer is None:  # a store built elsewhere signs with this node's key
        store.sealer.signer = signer
    pol = settings.policy
    registry, hub = build_tools(settings, wd)
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
        timeout_for=schedule_timeouts([s.to_runtime() for s in settings.schedules]))
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
    worker = Worker(engine=engine, poll_interval=settings.daemon.poll_interval.total_seconds())
    decider = Decider(engine=engine, on_runnable=worker.hand_over)
    authorizer = Authorizer(approvers=frozenset(ap.approvers), oncall=oncall or router.current)
    rules = [NotifyRule(platform=surface_name(n.platform), channel=n.target,
                        events=frozenset(map(str, n.events)), include_content=n.include_content)
             for n in settings.notify]
    public = settings.daemon.public_url
    notifier = Notifier(store=store, clock=clock, rules=rules, console_url=public,
                        outages=engine.outages)  # its loops' failures show in /health
    flow = ApprovalFlow(store=store, decider=decider, clock=clock, surfaces=chosen,
                        authorizer=authorizer, notifier=notifier, console_url=public,
                        step_up=frozenset(ap.step_up),
                        previews=functools.partial(registry.preview, ctx=context),
                        delivered=telemetry.card_delivered if telemetry else None,
                        passkeys=Passkeys(store=store, clock=clock, rp=RelyingParty.of(public),
                                          people=config.people)
                        if ap.step_up_with == "passkey" else None)
    notifier.on_flush = flow.dispatcher.wake
    notifier.names = flow.names.name  # lines name deciders as cards do
    listener.add(flow)
    if telemetry is not None:
        listener.add(telemetry)
    worker.gate = flow.dispatcher.room  # approval cards before more autonomous work
    flow.dispatcher.outages = engine.outages  # its outages show in /health
    # Built here so that a schedule naming an unknown tool is a config error at start.
    scheduler = Scheduler(engine=engine, schedules=[s.to_runtime() for s in settings.schedules],
                          clock=clock, wake=worker.wake)
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


class PendingCards:
    """Late-bound `/pending` lister (and card lookup) for surfaces built before the node."""

    def __init__(self) -> None:
        self.node: Node | None = None

    async def __call__(self) -> list[ApprovalCard]:
        from signoff.bot.cards import build_card

        if self.node is None:
            return []
        page = await self.node.store.pending_requests(limit=20)
        url = self.node.settings.daemon.public_url
        flow = self.node.flow
        return [build_card(r.task, r.approval, console_url=url,
                           preview=await flow.preview(r.approval), step_up=flow.step_up,
                           people=flow.names)
                for r in page.items]

    async def lookup(self, approval_id: str) -> PostedCard | None:
        """One request's current card and where it was posted (`SurfaceDeps.lookup`)."""
        from signoff.bot.cards import build_card

        if self.node is None:
            return None
        store = self.node.store
        approval = await store.get_approval(approval_id)
        if approval is None:
            return None
        task = await store.get_task(approval.task_id) if approval.task_id else None
        if approval.task_id is not None and task is None:
            return None  # the request is gone (reset)
        refs = tuple(CardRef(r.surface, r.channel, r.message_id)
                     for r in await store.cards(approval_id))
        card = build_card(task, approval, console_url=self.node.settings.daemon.public_url,
                          preview=await self.node.flow.preview(approval),
                          step_up=self.node.flow.step_up, people=self.node.flow.names)
        return PostedCard(card=card, refs=refs)

    # -- `SurfaceDeps.subscriptions`: the store's push subscriptions, once there is one ----
    def _store(self) -> TaskStore:
        if self.node is None:
            raise PlatformUnavailable("the daemon is starting: no store yet")
        return self.node.store

    async def add_push_subscription(self, sub: PushSubscription) -> PushSubscription:
        """Keep one (`TaskStore.add_push_subscription`)."""
        return await self._store().add_push_subscription(sub)

    async def push_subscriptions(self, holder: str | None = None) -> list[PushSubscription]:
        """``holder``'s or everyone's (`TaskStore.push_subscriptions`)."""
        return await self._store().push_subscriptions(holder)

    async def remove_push_subscription(self, sub_id: str, *, holder: str | None = None
                                       ) -> bool:
        """Forget one (`TaskStore.remove_push_subscription`)."""
        return await self._store().remove_push_subscription(sub_id, holder=holder)


def surface_name(prefix: str) -> str:
    """The surface whose channels are written ``<prefix>:<id>`` (the prefix if none is)."""
    plugin = surface_registry().by_prefix(prefix)
    return plugin.name if plugin is not None else prefix


def build_surfaces(settings: Settings, *, deps: SurfaceDeps,
                   registry: SurfaceRegistry | None = None) -> dict[str, Surface]:
    """Every surface the daemon runs: those with a config section, and the `always` ones.

    One loop over the registered plug-ins (`signoff.bot.plugins`); each imports its SDK
    only in its ``build``.
    """
    out: dict[str, Surface] = {}
    for plugin in (registry or surface_registry()).plugins.values():
        section = settings.surface(plugin.name)
        if section is None and not plugin.always:
            continue
        if section is not None and plugin.enabled is not None and not plugin.enabled(section):
            continue
        surface = plugin.build(section, deps)
        if surface.name != plugin.name or surface.channel_prefix != plugin.channel_prefix:
            raise ConfigError(
                f"surface plug-in {plugin.name!r} built a surface named {surface.name!r} with "
                f"channel prefix {surface.channel_prefix!r} (expected {plugin.name!r} and "
                f"{plugin.channel_prefix!r})")
        out[plugin.name] = surface
    return out


def load_node(config: str | Path | None, *, chat: bool = True) -> Node:
    """A node for CLI commands that work on the daemon's database directly
    (``chat=False``: see `signoff.config.settings.load_settings`)."""
    from signoff.config.settings import load_settings

    settings = load_settings(config, chat=chat) if config else Settings.default()
    return build_node(settings)


def api_providers(node: Node) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """(schedules provider, on-call provider, extra services) for the daemon."""
    from signoff.bot.routing.escalation import Escalator

    assert node.scheduler is not None and node.oncall is not None
    scheduler, router = node.scheduler, node.oncall
    escalator = Escalator(decider=node.decider, clock=node.clock, rotations=router.rotations,
                          overrides=router.overrides, wake=node.flow.dispatcher.wake)

    async def schedules() -> list[dict[str, Any]]:
        return await scheduler.status()

    async def oncall(at: datetime | None) -> dict[str, Any]:
        return router.describe(at)

    services: list[tuple[str, Any]] = [("scheduler", scheduler.run),
                                       ("escalation", escalator.run)]
    reminder = build_reminder(node)
    if reminder is not None:
        services.append(("reminders", reminder.run))
    if node.flow.notifier is not None:
        services.append(("notify", node.flow.notifier.run))
        if any("audit_head" in r.events for r in node.flow.notifier.rules):
            services.append(("audit-head", node.flow.notifier.run_audit_head))
    return schedules, oncall, services


def build_reminder(node: Node) -> Reminder | None:
    """The reminder service when ``approvals.remind_before`` is set."""
    from signoff.bot.routing.reminders import Reminder

    before = node.settings.approvals.remind_before
    if before is None:
        return None
    router = node.oncall
    reminder = Reminder(store=node.store, clock=node.clock, before=before,
                        approvers=node.settings.approvals.approvers,
                        oncall=router.current if router is not None else None,
                        wake=node.flow.dispatcher.wake)
    reminder.outages = node.engine.outages  # its outages show in /health
    return reminder


def cluster_services(node: Node) -> list[tuple[str, Any]]:
    """The node registry heartbeat and, on PostgreSQL, the LISTEN/NOTIFY wake-ups."""
    from signoff.runtime.nodes import Heartbeat
    from signoff.runtime.store.postgres.notify import TaskWakeups
    from signoff.runtime.store.sql.store import SqlTaskStore

    heartbeat = Heartbeat(store=node.store, clock=node.clock,
                          node_id=node.engine.config.node_id, host=socket.gethostname(),
                          interval=node.settings.daemon.heartbeat,
                          running=lambda: node.worker.busy, outages=node.engine.outages)
    services: list[tuple[str, Any]] = [("heartbeat", heartbeat.run)]
    if isinstance(node.store, SqlTaskStore) and not node.store.is_sqlite:
        # The node's own inserts already woke its worker (API, scheduler): skip the echo.
        wakeups = TaskWakeups(url=node.store.url, wake=node.worker.wake,
                              ignore=node.store.wakeup_sender, outages=node.engine.outages)
        services.append(("notify-listen", wakeups.run))
    return services


@dataclass(frozen=True)
class ClusterPorts:
    """What the surfaces need to behave as one node among several (`SurfaceDeps`)."""

    leadership: Leadership
    replay: ReplayLedger | None  # None: each surface keeps its own per-process record
    services: tuple[tuple[str, Any], ...] = ()

    def report_to(self, outages: Outages) -> None:
        """Lost leases are reported to ``outages`` (named in ``/health`` while they last)."""
        from signoff.runtime.store.postgres.leader import PgLeadership

        if isinstance(self.leadership, PgLeadership):
            self.leadership.outages = outages


def cluster_ports(settings: Settings, *, work_dir: Path | None, database: str | None,
                  clock: Clock, state: Path | None = None) -> ClusterPorts:
    """On PostgreSQL, advisory-lock leadership and the shared replay table; on any other
    database (one node) always the leader, and replays remembered per process
    (``state``: the state dir when the caller prepared it already)."""
    from signoff.runtime.leadership import SoleLeadership

    url = database or settings.database_url(work_dir)
    settings.resolved_work_dir(work_dir).mkdir(parents=True, exist_ok=True)
    nid = node_id(settings, state or prepare_state(settings, work_dir))
    if sa_backend(url) != "postgresql":
        return ClusterPorts(leadership=SoleLeadership(node_id=nid), replay=None)
    from signoff.runtime.store.postgres.leader import PgLeadership
    from signoff.runtime.store.postgres.replay import SqlReplayLedger

    ledger = SqlReplayLedger(url=url, clock=clock)
    return ClusterPorts(leadership=PgLeadership(url=url, node_id=nid), replay=ledger,
                        services=(("replay-ledger", ledger.run),))


def sa_backend(url: str) -> str:
    """The database kind of a SQLAlchemy URL (``postgresql``, ``sqlite``)."""
    import sqlalchemy as sa

    try:
        return sa.engine.make_url(url).get_backend_name()
    except sa.exc.ArgumentError:
        return ""


def api_keys(settings: Settings) -> dict[str, str]:
    """API key → actor name: ``admin`` for ``api.key``, each ``[[api.keys]]`` by its name."""
    from signoff.api.context import ADMIN

    keys: dict[str, str] = {}
    if settings.api.key:
        keys[settings.api.key] = ADMIN
    for entry in settings.api.keys:
        keys.setdefault(entry.key, entry.name)
    return keys


def api_roles(settings: Settings) -> dict[str, str]:
    """Actor name → role (`signoff.api.access`): ``admin`` for ``api.key``, each
    ``[[api.keys]]`` entry its own ``role``."""
    roles: dict[str, str] = {entry.name: entry.role for entry in settings.api.keys}
    if settings.api.key:
        roles["admin"] = "admin"
    return roles


async def forget_stale_subscriptions(store: TaskStore, settings: Settings, *,
                                     local: bool) -> int:
    """Forget the push subscriptions of people who no longer hold a key that may decide
    (a key removed from the config, or made a requester): their notifications' tokens
    would otherwise still decide as them. Run at start-up; returns how many went."""
    keys, roles = api_keys(settings), api_roles(settings)
    deciders = {f"web:{name}" for name in keys.values() if roles.get(name) != "requester"}
    if local and not keys:
        deciders.add("web:local")  # the keyless loopback console
    gone = 0
    for sub in await store.push_subscriptions():
        if sub.holder not in deciders and await store.remove_push_subscription(sub.id):
            gone += 1
    if gone:
        log.info("push_subscriptions_forgotten", extra={"count": gone})
    return gone


def api_context(settings: Settings, **parts: Any) -> ApiContext:
    """The API's context from the config file: ``keys``, ``local_no_key`` (no key on a
    loopback host) and ``public_url`` filled in unless given; the rest from ``parts``."""
    from signoff.api.context import ApiContext
    from signoff.net import is_loopback

    keys = api_keys(settings)
    parts.setdefault("keys", keys)
    parts.setdefault("roles", api_roles(settings))
    parts.setdefault("session_ttl", settings.api.session_ttl)
    parts.setdefault("sign_in_attempts", settings.api.sign_in_attempts)
    parts.setdefault("local_no_key", not keys and is_loopback(settings.daemon.host))
    parts.setdefault("public_url", settings.daemon.public_url)
    return ApiContext(**parts)
