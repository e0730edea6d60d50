"""The configuration file: typed settings for every section, loaded from TOML.

``load_settings(path)`` reads the file, substitutes ``${ENV}`` / ``${ENV:-default}`` in
every string (secrets stay out of the file), validates it and returns a frozen
:class:`Settings`; ``Settings.default()`` gives the embedded defaults with no file at all.
Every problem raises :class:`~signoff.errors.ConfigError` with one line per problem:
``config.toml: approvals.timeout: invalid duration 'abc' (use e.g. '30s', '15m', '2h')``.
Unknown keys are errors (a typo must not silently fall back to a default).

Each chat surface brings the model of its own section (``[slack]``, ``[telegram]``, or a
plug-in's ``[discord]``): the sections allowed beside the ones below are those of the
surfaces registered under the ``signoff.surfaces`` entry points (`signoff.bot.plugins`),
each validated by its surface's model and kept in `Settings.surfaces`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core.core_schema import ValidationInfo

from signoff.adapters.email.settings import EmailAddress, EmailSurfaceSettings

# Only for `Settings.slack` / `Settings.telegram`, which existing callers use; a new surface
# needs no line here (`settings.surface("discord")`).
from signoff.adapters.slack.settings import SlackMode, SlackSettings
from signoff.adapters.telegram.settings import TelegramMode, TelegramSettings
from signoff.bot.plugins import surface_registry
from signoff.config.checks import (
    ActorKey,
    DatabaseUrl,
    Duration,
    HttpUrl,
    NonEmpty,
    PositiveDuration,
    Regex,
    Risk,
    absolute_sqlite_url,
    check_actor,
    error_items,
    mask_secrets,
    mask_url,
    problem,
    problems,
    read_toml,
    substitute_env,
)
from signoff.config.fields import (
    ApprovalMode,
    CronMode,
    NotifyEvent,
    PlannerKind,
    PlannerMode,
    Section,
)
from signoff.config.mcp import McpSettings, describe_server, server_key, server_names
from signoff.config.ops import (
    NotifySettings,
    OncallOverride,
    OncallSettings,
    Rotation,
    Schedule,
    StepSpec,
)
from signoff.errors import ConfigError
from signoff.runtime.models import ALL_SCOPES, OnDeny, RiskClass, Scope
from signoff.runtime.people import People, clashes
from signoff.runtime.policy.net import NetAllow
from signoff.runtime.tools.builtin.shell import runs_work_dir_code

__all__ = [
    "ApiKey", "ApiSettings", "ApprovalMode", "ApprovalsSettings", "CronMode",
    "DaemonSettings", "EmailSettings", "EvaluationSettings", "McpSettings", "NotifyEvent",
    "NotifySettings",
    "OnDeny", "OncallOverride", "OncallSettings", "PlannerKind", "PlannerMode",
    "PlannerSettings", "PolicySettings",
    "Recipe", "Rotation", "Schedule", "Settings", "SlackMode", "SlackSettings", "StepSpec",
    "TelegramMode", "TelegramSettings", "ToolsSettings", "check_config", "load_settings",
    "shown", "source_name", "summary",
]  # fmt: skip


EventLoop = Literal["auto", "uvloop", "asyncio"]  # daemon.event_loop


class DaemonSettings(Section):
    """[daemon]: where the daemon listens and keeps its state."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    work_dir: Path = Path("./signoff-work")
    # The daemon's own files (database, node id, keys, logs): never inside work_dir, where
    # the tools could read or overwrite them. None: "signoff-state" beside work_dir.
    state_dir: Path | None = None
    database: DatabaseUrl | None = None  # None: sqlite file signoff.db inside state_dir
    max_retries: int = Field(default=1, ge=0)
    node_id: str | None = None  # None: host name + a random suffix kept in state_dir
    public_url: HttpUrl | None = None  # base URL of the console, used in chat links
    lease: PositiveDuration = timedelta(seconds=60)
    heartbeat: PositiveDuration = timedelta(seconds=5)  # node registry beat; live = 3 beats
    poll_interval: PositiveDuration = timedelta(milliseconds=500)  # queue look without a wake
    # False: a task that ran a step on a node runs there to the end (its files are on that
    # node's disk); True: every node sees the same work dir (NFS), any node may go on.
    shared_work_dir: bool = False
    # SIGTERM: how long tasks in flight may finish before they are cut short (and requeued
    # on the next start); keep it under a supervisor's stop timeout (systemd: 90 s).
    shutdown_grace: Duration = timedelta(seconds=10)
    # A database outage this long ends the daemon (exit code 3) for a supervisor to act
    # on; None (the default): outages are waited out however long they last.
    db_outage_limit: PositiveDuration | None = None
    # Peers whose X-Forwarded-For / X-Forwarded-Proto are believed (a reverse proxy's
    # address or network). Empty, the default: forwarded headers are nothing, and a
    # request's address is its TCP peer's (a local process cannot pick the address its
    # failed sign-ins are counted by).
    trusted_proxies: list[NonEmpty] = []
    # "auto": uvloop where it is installed (it is a dependency on Linux and macOS), else
    # asyncio's own loop; "asyncio" asks for asyncio's loop; "uvloop" refuses to start
    # without it.
    event_loop: EventLoop = "auto"

    @field_validator("trusted_proxies")
    @classmethod
    def _trusted_proxies(cls, value: list[str]) -> list[str]:
        for entry in value:
            proxy_network(entry)  # a ValueError names the bad entry
        return value

    @model_validator(mode="after")
    def _state_outside_work(self) -> Self:
        problem_text = state_inside_work(self.work_dir, self.state_dir)
        if problem_text:
            raise problem("state_dir", problem_text)
        return self


def proxy_network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """One entry of ``daemon.trusted_proxies``: an IP address or a network (CIDR)."""
    try:
        return ipaddress.ip_network(entry.strip(), strict=False)
    except ValueError:
        pass
    raise ValueError(f"{entry!r} is not an IP address or network (e.g. \"127.0.0.1\" or "
                     f"\"10.0.0.0/8\"): name the proxy itself, never every address")


def default_state_dir(work_dir: Path) -> Path:
    """``signoff-state`` beside the (resolved) work dir."""
    return work_dir.expanduser().resolve().parent / "signoff-state"


def state_inside_work(work_dir: Path, state_dir: Path | None) -> str | None:
    """Why ``state_dir`` may not be used with ``work_dir`` (None when it may)."""
    work = work_dir.expanduser().resolve()
    state = (state_dir.expanduser().resolve() if state_dir is not None
             else default_state_dir(work_dir))
    if state.is_relative_to(work):
        return (f"the state dir {state} is inside the work dir {work}: the tools could read "
                f"and overwrite the daemon's database and keys; set daemon.state_dir to a "
                f"directory outside it")
    return None


class ApiKey(Section):
    """[[api.keys]]: a named key; its holder acts as ``web:<name>`` with ``role``:
    ``admin`` (everything), ``approver`` (reads, decides and submits; the default, as in
    0.2) or ``requester`` (submits, reads and withdraws its own; never decides)."""

    name: NonEmpty
    key: NonEmpty
    role: Literal["admin", "approver", "requester"] = "approver"


class ApiSettings(Section):
    """[api]: bearer keys for the HTTP API and console."""

    key: str | None = None
    keys: list[ApiKey] = []
    session_ttl: PositiveDuration = timedelta(hours=12)  # a console sign-in lasts this long
    sign_in_attempts: int = Field(default=5, ge=1)  # failed sign-ins per address per minute
    # Without a key, only the daemon's own user (and root) may connect as web:local; true
    # lets every account on this machine decide (and is needed where the system cannot
    # tell who opened a connection: no /proc/net/tcp, e.g. macOS). Weaker: an opt-in.
    keyless_any_local_user: bool = False

    @field_validator("key")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        # `key = "${SIGNOFF_API_KEY:-}"` must mean "no key", not "the empty key".
        return value or None

    @model_validator(mode="after")
    def _unique(self) -> Self:
        # `[api] key` is web:admin; web:local is the keyless caller: neither may be reused.
        seen: set[str] = {"admin", "local"} if self.key else {"local"}
        for i, entry in enumerate(self.keys):
            if entry.name in seen:
                raise problem(f"keys[{i}].name", f"duplicate key name {entry.name!r}"
                              + (" (taken by [api] key or the keyless mode)"
                                 if entry.name in ("admin", "local") else ""))
            seen.add(entry.name)
        # One key, one holder: a key listed twice would act as whichever came first.
        values = [self.key] if self.key else []
        for i, entry in enumerate(self.keys):
            if entry.key in values:
                raise problem(f"keys[{i}].key", "the same key as another entry (each "
                                                "holder needs a key of its own)")
            values.append(entry.key)
        return self


def _default_scopes() -> dict[RiskClass, list[Scope]]:
    return {RiskClass.SEND: list(ALL_SCOPES), RiskClass.DESTRUCTIVE: list(ALL_SCOPES)}


MAX_HOLD = timedelta(hours=1)
MAX_QUORUM = 20


class ApprovalsSettings(Section):
    """[approvals]: who decides, how long a request waits, what may run unattended."""

    mode: ApprovalMode = ApprovalMode.MANUAL
    cron_mode: CronMode = CronMode.DENY
    timeout: PositiveDuration = timedelta(minutes=30)
    autonomous_risks: list[Risk] = [RiskClass.READ, RiskClass.DRAFT]
    approvers: list[ActorKey] = []
    forbid_self_approval: bool = False
    coalesce: bool = True  # identical pending requests share one card
    scopes: dict[Risk, list[Scope]] = Field(default_factory=_default_scopes)
    # An always grant lapses this long after the decision unless the answer gives "for".
    grant_ttl: PositiveDuration = timedelta(days=30)
    # A request denied for a policy_id is answered "denied earlier" when asked again
    # unchanged within this long, instead of a fresh card per retry ("0": off).
    remember_deny: Duration = timedelta(hours=1)
    # Risk classes decided only in the console: their chat buttons link there instead.
    step_up: list[Risk] = []
    # How a step-up request is confirmed: any signed-in console key, or a passkey
    # assertion bound to the request, its action and the answer (signoff.runtime.passkeys).
    step_up_with: Literal["console", "passkey"] = "console"
    # Off unless set: a reminder is one more message in busy channels, so it is opted into.
    remind_before: PositiveDuration | None = None
    email_to: list[EmailAddress] = []  # each card also mailed here (needs [email])
    # The undo window after the approval that decides, per risk class ("0s": none).
    hold: dict[Risk, Duration] = Field(default_factory=lambda: {
        RiskClass.SEND: timedelta(0), RiskClass.DESTRUCTIVE: timedelta(0)})

    @field_validator("hold")
    @classmethod
    def _hold(cls, value: dict[RiskClass, timedelta]) -> dict[RiskClass, timedelta]:
        for risk, window in value.items():
            if window > MAX_HOLD:
                raise problem(risk.value, "a hold of more than 1h would outlive most "
                                          "approval timeouts; use at most '1h'")
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: dict[RiskClass, list[Scope]]) -> dict[RiskClass, list[Scope]]:
        for risk, scopes in value.items():
            if Scope.DENY not in scopes:
                raise problem(risk.value, "'deny' must always be offered")
        # Risk classes the file leaves out keep their defaults; order is canonical.
        merged = _default_scopes() | value
        return {r: [s for s in ALL_SCOPES if s in scopes] for r, scopes in merged.items()}

    def scopes_for(self, risk: RiskClass) -> list[Scope]:
        """The decisions offered for ``risk`` (all four unless configured)."""
        return list(self.scopes.get(risk, ALL_SCOPES))


class EvaluationSettings(Section):
    """[evaluation]: how far --yolo and mode=off may go."""

    strict_yolo: bool = False


class TelemetrySettings(Section):
    """[telemetry]: OpenTelemetry traces and metrics (off by default; the exporters are
    configured by the standard OTEL_EXPORTER_OTLP_* variables)."""

    enabled: bool = False


class PolicySettings(Section):
    """[policy]: global prohibitions, harmless commands, per-task budgets."""

    prohibit: list[NonEmpty] = []
    read_only_commands: list[NonEmpty] = []
    budgets: dict[str, Annotated[int, Field(gt=0)]] = {}
    command_timeout: PositiveDuration = timedelta(seconds=60)
    # [policy.quorum]: distinct approvers per capability ("fs.delete") or risk class.
    quorum: dict[NonEmpty, Annotated[int, Field(ge=1, le=MAX_QUORUM)]] = {}
    # Network destinations exempt from the private-network rule: hosts, "*.suffix", CIDRs.
    net_allow: list[NonEmpty] = []
    # A Cedar policy file consulted after prohibitions and budgets (runtime/policy/cedar.py);
    # read by `config check`, `daemon start` and `policy test`, not by every command.
    cedar: Path | None = None

    @field_validator("net_allow")
    @classmethod
    def _net_allow(cls, value: list[str]) -> list[str]:
        NetAllow.parse(value)  # a ValueError names the bad entry
        return value

    @field_validator("read_only_commands")
    @classmethod
    def _read_only_commands(cls, value: list[str]) -> list[str]:
        for command in value:
            why = runs_work_dir_code(command)
            if why:
                raise ValueError(f"{command!r} cannot be read-only: {why}; leave it out "
                                 f"and a person is asked each time (DESTRUCTIVE)")
        return value

    @field_validator("quorum")
    @classmethod
    def _quorum(cls, value: dict[str, int]) -> dict[str, int]:
        # A risk class in any case means the risk class ("send" = "SEND"); the rest are
        # capabilities, matched exactly.
        risks = {r.value for r in RiskClass}
        return {(k.upper() if k.upper() in risks else k): n for k, n in value.items()}


class PlannerSettings(Section):
    """[planner]: the built-in rules planner or an OpenAI-compatible endpoint.

    With ``kind = "openai"`` the default ``mode = "agent"`` works turn by turn (limits
    ``max_turns``, ``max_actions``; ``on_deny``); ``mode = "plan"`` plans once, as in 0.1.
    ``timeout`` bounds each call to the endpoint.
    """

    kind: PlannerKind = PlannerKind.RULES
    mode: PlannerMode = PlannerMode.AGENT
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout: PositiveDuration = timedelta(seconds=30)
    max_turns: Annotated[int, Field(gt=0, le=1000)] = 20
    max_actions: Annotated[int, Field(gt=0, le=10_000)] = 50
    on_deny: OnDeny = OnDeny.TELL_MODEL
    system_prompt: str = ""

    @property
    def agent(self) -> bool:
        """True when goals without steps go to the agent loop."""
        return self.kind is PlannerKind.OPENAI and self.mode is PlannerMode.AGENT

    @model_validator(mode="after")
    def _openai_needs(self) -> Self:
        for key in ("base_url", "model"):
            if self.kind is PlannerKind.OPENAI and not getattr(self, key):
                raise problem(key, 'required when kind = "openai"')
        return self


class Recipe(Section):
    """[[recipes]]: goals matching ``match`` run these steps instead of being planned."""

    name: NonEmpty
    match: Regex
    steps: list[StepSpec] = Field(min_length=1)
    description: str | None = None

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """``match`` compiled case-insensitively (goals are typed by people)."""
        return re.compile(self.match, re.IGNORECASE)


# Accounts of surfaces whose callers are named by signoff itself, not by a chat platform's
# user ids: the console/API (``web:<key name>``) and the terminal.
_NAMED_ACCOUNTS = ("web", "terminal", "cli")


def _check_account(value: str) -> str:
    surface, _, name = value.partition(":")
    if surface in _NAMED_ACCOUNTS:
        if not name or name != name.strip() or any(c.isspace() for c in name):
            raise ValueError(f"invalid account {value!r} (expected '{surface}:<name>', "
                             f"such as 'web:alice' for the API key named alice)")
        return value
    try:
        return check_actor(value)
    except ValueError as exc:
        said = str(exc).replace("invalid approver", "invalid account")
        raise ValueError(f"{said}; or 'web:<API key name>'") from None


class Person(Section):
    """[[people]]: one person's accounts; a quorum counts people, self-approval compares
    people, cards show ``name`` (`signoff.runtime.people`)."""

    name: NonEmpty
    accounts: list[Annotated[str, AfterValidator(_check_account)]] = Field(min_length=1)


class EmailSettings(Section):
    """[email]: the SMTP server used by send_email."""

    host: str = "localhost"
    port: int = Field(default=25, ge=1, le=65535)
    sender: str = Field(default="signoff@localhost", alias="from")
    starttls: bool = False
    username: str | None = None
    password: str | None = None
    timeout: PositiveDuration = timedelta(seconds=30)


class RunCommandSettings(Section):
    """[tools.run_command]: what a command's child process may see of the daemon."""

    # Only these variables of the daemon's environment are passed on; never its secrets.
    env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = [
        "PATH", "HOME", "LANG", "LC_ALL", "TZ"]


class ToolsSettings(Section):
    """[tools]: settings of the built-in tools."""

    run_command: RunCommandSettings = RunCommandSettings()


class Settings(Section):
    """The whole configuration file."""

    daemon: DaemonSettings = DaemonSettings()
    api: ApiSettings = ApiSettings()
    approvals: ApprovalsSettings = ApprovalsSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    policy: PolicySettings = PolicySettings()
    planner: PlannerSettings = PlannerSettings()
    recipes: list[Recipe] = []
    email: EmailSettings = EmailSettings()
    schedules: list[Schedule] = []
    oncall: OncallSettings = OncallSettings()
    notify: list[NotifySettings] = []
    mcp: McpSettings = McpSettings()
    people: list[Person] = []
    tools: ToolsSettings = ToolsSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    # The surfaces' sections, validated by their own models (see the module docstring).
    _surfaces: dict[str, BaseModel] = PrivateAttr(default_factory=dict)
    # Surface sections a read-only load set aside: section name -> why (see load_settings).
    _unresolved: dict[str, tuple[str, ...]] = PrivateAttr(default_factory=dict)
    # The file these settings were read from (None: the embedded defaults).
    _source: Path | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # Where settings were read from is not part of them: the same file's content in
        # two places is the same settings.
        if not isinstance(other, Settings):
            return NotImplemented
        def own(s: Settings) -> dict[str, Any]:
            return {k: v for k, v in (s.__pydantic_private__ or {}).items() if k != "_source"}
        return (type(self) is type(other) and self.__dict__ == other.__dict__
                and own(self) == own(other) and self.__pydantic_extra__ == other.__pydantic_extra__)

    __hash__ = None  # type: ignore[assignment]  # as pydantic's own: settings are mutable

    @property
    def source(self) -> Path | None:
        """The config file these settings came from, absolute (None: the defaults). The
        file tools refuse it (see `signoff.runtime.state.ProtectedFiles`)."""
        return self._source

    @classmethod
    def default(cls) -> Settings:
        """The embedded defaults: SQLite in ./signoff-state, 127.0.0.1:8080, no chat."""
        return cls()

    # A whole-program mypy run infers Never for this wrap validator's model type (a check
    # of this file alone passes); the signature is pydantic's ModelWrapValidator with info.
    @model_validator(mode="wrap")  # type: ignore[arg-type]
    @classmethod
    def _with_surfaces(cls, data: Any, handler: ModelWrapValidatorHandler[Settings],
                       info: ValidationInfo) -> Settings:
        # The surface sections are split off and validated by their own models; every
        # problem, theirs and the rest, is reported at once, one line each.
        if not isinstance(data, Mapping):
            return handler(data)
        registry = surface_registry()
        models = registry.sections()
        own: dict[str, Any] = {}
        sections: dict[str, BaseModel] = {}
        found: list[tuple[str, str]] = []
        for key, value in data.items():
            if key in models and key not in cls.model_fields:
                try:
                    sections[key] = models[key].model_validate(value)
                except ValidationError as exc:
                    found.extend(error_items(exc, models[key], base=key))
            elif key in registry.broken and key not in cls.model_fields:
                found.append((key, f"the surface plug-in {key!r} could not be loaded "
                                   f"({registry.broken[key]})"))
            else:
                own[key] = value
        try:
            settings = handler(own)
        except ValidationError as exc:
            found[:0] = error_items(exc, cls, top=list(models))
            raise problems(found) from None
        found.extend(settings._email_surface(sections))
        settings._surfaces = sections
        settings._unresolved = dict((info.context or {}).get(UNRESOLVED, {}))
        found.extend(settings._cross_checks())
        found.extend(settings._people_checks())
        if found:
            raise problems(found)
        return settings

    def _email_surface(self, sections: dict[str, BaseModel]) -> list[tuple[str, str]]:
        # The e-mail surface has no section of its own: [email] is send_email's SMTP
        # server, approvals.email_to says who gets the cards, the links lead to the
        # daemon's public URL (see signoff.adapters.email).
        to = self.approvals.email_to
        if not to:
            return []
        if "email" not in self.model_fields_set:
            return [("approvals.email_to", "needs an [email] section (the SMTP server "
                                           "that sends the cards)")]
        d = self.daemon
        if d.public_url is None and d.host in ("0.0.0.0", "::", ""):
            return [("approvals.email_to", f"needs daemon.public_url: the links in the mails "
                                           f"cannot point at {d.host!r}")]
        em = self.email
        sections["email"] = EmailSurfaceSettings(
            to=list(dict.fromkeys(to)), public_url=d.public_url,
            host=em.host, port=em.port, sender=em.sender, starttls=em.starttls,
            username=em.username, password=em.password, timeout=em.timeout)
        return []

    def _cross_checks(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for kind, items in (("schedule", self.schedules), ("recipe", self.recipes)):
            names = [item.name for item in items]
            for i, name in enumerate(names):
                if name in names[:i]:
                    found.append((f"{kind}s[{i}].name", f"duplicate {kind} name {name!r}"))
        registry = surface_registry()
        for i, target in enumerate(self.notify):
            plugin = registry.by_prefix(target.platform)
            name = plugin.name if plugin is not None else target.platform
            configured = name in self._surfaces or name in self._unresolved
            if plugin is None or not (plugin.always or configured):
                found.append((f"notify[{i}].channel",
                              f"{target.platform} is not configured (add a [{name}] section)"))
        return found

    def _people_checks(self) -> list[tuple[str, str]]:
        # One account is one person's: listed under two, its vote would count for either.
        names = [p.name for p in self.people]
        found = [(f"people[{i}].name", f"duplicate person {name!r}")
                 for i, name in enumerate(names) if name in names[:i]]
        listed = [(p.name, p.accounts) for p in self.people]
        found.extend((f"people[{i}].accounts[{j}]", words) for i, j, words in clashes(listed))
        return found

    @cached_property
    def who_is_who(self) -> People:
        """``[[people]]`` as the runtime's `People` (who counts as whom)."""
        return People.of([(p.name, p.accounts) for p in self.people])

    @property
    def surfaces(self) -> Mapping[str, BaseModel]:
        """The configured surface sections by surface name (``{"slack": SlackSettings}``)."""
        return MappingProxyType(self._surfaces)

    def surface(self, name: str) -> BaseModel | None:
        """The ``[<name>]`` section of surface ``name``, or None when the file has none."""
        return self._surfaces.get(name)

    @property
    def unresolved(self) -> Mapping[str, tuple[str, ...]]:
        """Surface sections a ``chat=False`` load set aside, each with its missing variables."""
        return MappingProxyType(self._unresolved)

    @property
    def slack(self) -> SlackSettings | None:
        """The ``[slack]`` section, if any."""
        section = self.surface("slack")
        return section if isinstance(section, SlackSettings) else None

    @property
    def telegram(self) -> TelegramSettings | None:
        """The ``[telegram]`` section, if any."""
        section = self.surface("telegram")
        return section if isinstance(section, TelegramSettings) else None

    def resolved_work_dir(self, work_dir_override: Path | None = None) -> Path:
        """The absolute work dir (relative paths are taken from the current directory)."""
        return (work_dir_override or self.daemon.work_dir).expanduser().resolve()

    def resolved_state_dir(self, work_dir_override: Path | None = None) -> Path:
        """The absolute state dir: ``daemon.state_dir``, else ``signoff-state`` beside the
        work dir. ConfigError when it lies inside the work dir (``--work-dir`` included)."""
        work = self.resolved_work_dir(work_dir_override)
        why = state_inside_work(work, self.daemon.state_dir)
        if why:
            raise ConfigError(f"daemon.state_dir: {why}")
        if self.daemon.state_dir is None:
            return default_state_dir(work)
        return self.daemon.state_dir.expanduser().resolve()

    def database_url(self, work_dir_override: Path | None = None) -> str:
        """The SQLAlchemy URL to use, with any SQLite path made absolute.

        A relative ``sqlite:///rel.db`` is resolved against the current working directory,
        not the config file's directory (see :func:`absolute_sqlite_url` for why).
        """
        if self.daemon.database is None:
            db = self.resolved_state_dir(work_dir_override) / "signoff.db"
            return f"sqlite:///{db}"
        return absolute_sqlite_url(self.daemon.database)


# The validation context's key for the surface sections a read-only load set aside.
UNRESOLVED = "unresolved"


def load_settings(path: str | Path | None, *, environ: Mapping[str, str] | None = None,
                  chat: bool = True) -> Settings:
    """Read, substitute and validate a config file; ``None`` gives the defaults.

    ``environ`` replaces ``os.environ`` for ``${ENV}`` substitution (tests, embedding).
    ``chat=False`` is for the commands that talk to no chat surface (``oncall``,
    ``schedules``, ``audit``, ``tools``, ``nodes``): a surface section naming an unset
    ``${ENV}`` (its tokens), or ``[email]``/``[planner]`` naming one (the SMTP password, the
    model's API key), is set aside instead of failing, and `Settings.unresolved` says why.
    ``daemon start`` and ``config check`` load with ``chat=True``: every variable must be
    set. Raises :class:`ConfigError` naming the file, the key path and each problem.
    """
    if path is None:
        return Settings.default()
    source = Path(path)
    raw = read_toml(source)
    unresolved = {} if chat else _set_aside_surfaces(raw, environ)
    data, missing = substitute_env(raw, environ)
    if missing:
        raise ConfigError("\n".join(f"{source}: {key}: {msg}" for key, msg in missing))
    try:
        settings = Settings.model_validate(data, context={UNRESOLVED: unresolved})
    except ValidationError as exc:
        names = server_names(data)
        lines = [f"{server_key(key, names) or '(top level)'}: {message}"
                 for key, message in error_items(exc, Settings)]
        raise ConfigError("\n".join(f"{source}: {line}" for line in lines)) from None
    settings._source = source.resolve()
    return settings


# Sections whose secrets only running work uses (the SMTP password of send_email, the model
# server's API key): a read-only command sets them aside too, and runs on their defaults.
RUN_TIME_SECRETS = ("email", "planner")


def _set_aside_surfaces(
    raw: dict[str, Any], environ: Mapping[str, str] | None
) -> dict[str, tuple[str, ...]]:
    """Take out of ``raw`` each surface section (and each of `RUN_TIME_SECRETS`) whose
    ``${ENV}`` cannot all be resolved."""
    aside: dict[str, tuple[str, ...]] = {}
    surfaces = [n for n in surface_registry().sections() if n not in Settings.model_fields]
    for name in (*surfaces, *RUN_TIME_SECRETS):
        if name not in raw:
            continue
        _, missing = substitute_env(raw[name], environ, name)
        if missing:
            aside[name] = tuple(f"{key}: {msg}" for key, msg in missing)
            del raw[name]
    return aside


def check_config(path: str | Path | None) -> str:
    """Validate a config file against the schema and summarise it.

    ``signoff config check`` adds the checks that need the tool registry
    (`signoff.config.preflight`), the same ones ``daemon start`` makes.
    """
    return summary(load_settings(path), path)


def shown(settings: Settings) -> dict[str, Any]:
    """The effective settings as ``signoff config show`` prints them: every section with
    its defaults, the chat sections too, secrets masked (`mask_secrets`); a chat section
    a read-only load set aside says why instead."""
    data = settings.model_dump(mode="json", by_alias=True)
    for name, section in settings.surfaces.items():
        if name not in data:
            data[name] = section.model_dump(mode="json", by_alias=True)
    for name, why in settings.unresolved.items():
        data[name] = {"not loaded": list(why)}
    return dict(mask_secrets(data))


def source_name(path: str | Path | None) -> str:
    """How messages name a config file ("(embedded defaults)" without one)."""
    return str(path) if path is not None else "(embedded defaults)"


def summary(settings: Settings, path: str | Path | None) -> str:
    """What ``signoff config check`` prints for a valid file."""
    surfaces = []
    for plugin in surface_registry().plugins.values():
        section = settings.surface(plugin.name)
        if section is not None and plugin.enabled is not None and not plugin.enabled(section):
            continue  # switched off in its section ([webpush] enabled = false)
        if section is not None and plugin.describe is not None:
            surfaces.append(f"{plugin.name} ({plugin.describe(section)})")
        elif section is not None or plugin.always:
            surfaces.append(plugin.name)
    return "\n".join(
        [
            f"{source_name(path)}: OK",
            f"database: {mask_url(settings.database_url())}",
            f"listen: {settings.daemon.host}:{settings.daemon.port}",
            f"surfaces: {', '.join(surfaces)}",
            f"schedules: {len(settings.schedules)}",
            f"rotations: {len(settings.oncall.rotations)}",
            f"mcp servers: {', '.join(map(describe_server, settings.mcp.servers)) or 'none'}",
        ]
    )
