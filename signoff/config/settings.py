"""The configuration file: typed settings for every section, loaded from TOML.

``load_settings(path)`` reads the file, substitutes ``${ENV}`` / ``${ENV:-default}`` in
every string (secrets stay out of the file), validates it and returns a frozen
:class:`Settings`; ``Settings.default()`` gives the embedded defaults with no file at all.
Every problem raises :class:`~signoff.errors.ConfigError` with one line per problem:
``config.toml: approvals.timeout: invalid duration 'abc' (use e.g. '30s', '15m', '2h')``.
Unknown keys are errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Annotated, Self

from pydantic import Field, ValidationError, field_validator, model_validator

from signoff.config.checks import (
    ActorKey,
    ChatId,
    DatabaseUrl,
    HttpUrl,
    NonEmpty,
    PositiveDuration,
    Regex,
    Risk,
    absolute_sqlite_url,
    describe_errors,
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
    Section,
    SlackMode,
    TelegramMode,
)
from signoff.config.mcp import McpSettings, command_problem, describe_server
from signoff.config.ops import (
    NotifySettings,
    OncallOverride,
    OncallSettings,
    Rotation,
    Schedule,
    StepSpec,
)
from signoff.errors import ConfigError
from signoff.runtime.models import ALL_SCOPES, RiskClass, Scope

__all__ = [
    "ApiKey", "ApiSettings", "ApprovalMode", "ApprovalsSettings", "CronMode",
    "DaemonSettings", "EmailSettings", "EvaluationSettings", "McpSettings", "NotifyEvent",
    "NotifySettings",
    "OncallOverride", "OncallSettings", "PlannerKind", "PlannerSettings", "PolicySettings",
    "Recipe", "Rotation", "Schedule", "Settings", "SlackMode", "SlackSettings", "StepSpec",
    "TelegramMode", "TelegramSettings", "check_config", "load_settings",
]  # fmt: skip


class DaemonSettings(Section):
    """[daemon]: where the daemon listens and keeps its state."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    work_dir: Path = Path("./signoff-work")
    database: DatabaseUrl | None = None  # None: sqlite file signoff.db inside work_dir
    max_retries: int = Field(default=1, ge=0)
    node_id: str | None = None
    public_url: HttpUrl | None = None  # base URL of the console, used in chat links
    lease: PositiveDuration = timedelta(seconds=60)


class ApiKey(Section):
    """[[api.keys]]: a named key; its holder acts as ``web:<name>``."""

    name: NonEmpty
    key: NonEmpty


class ApiSettings(Section):
    """[api]: bearer keys for the HTTP API and console."""

    key: str | None = None
    keys: list[ApiKey] = []

    @field_validator("key")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        # `key = "${SIGNOFF_API_KEY:-}"` must mean "no key", not "the empty key".
        return value or None

    @model_validator(mode="after")
    def _unique(self) -> Self:
        seen: set[str] = set()
        for i, entry in enumerate(self.keys):
            if entry.name in seen:
                raise problem(f"keys[{i}].name", f"duplicate key name {entry.name!r}")
            seen.add(entry.name)
        return self


def _default_scopes() -> dict[RiskClass, list[Scope]]:
    return {RiskClass.SEND: list(ALL_SCOPES), RiskClass.DESTRUCTIVE: list(ALL_SCOPES)}


class ApprovalsSettings(Section):
    """[approvals]: who decides, how long a request waits, what may run unattended."""

    mode: ApprovalMode = ApprovalMode.MANUAL
    cron_mode: CronMode = CronMode.DENY
    timeout: PositiveDuration = timedelta(minutes=30)
    autonomous_risks: list[Risk] = [RiskClass.READ, RiskClass.DRAFT]
    approvers: list[ActorKey] = []
    forbid_self_approval: bool = False
    scopes: dict[Risk, list[Scope]] = Field(default_factory=_default_scopes)

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


class PolicySettings(Section):
    """[policy]: global prohibitions, harmless commands, per-task budgets."""

    prohibit: list[NonEmpty] = []
    read_only_commands: list[NonEmpty] = []
    budgets: dict[str, Annotated[int, Field(gt=0)]] = {}
    command_timeout: PositiveDuration = timedelta(seconds=60)


class PlannerSettings(Section):
    """[planner]: the built-in rules planner or an OpenAI-compatible endpoint."""

    kind: PlannerKind = PlannerKind.RULES
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout: PositiveDuration = timedelta(seconds=30)

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


class EmailSettings(Section):
    """[email]: the SMTP server used by send_email."""

    host: str = "localhost"
    port: int = Field(default=25, ge=1, le=65535)
    sender: str = Field(default="signoff@localhost", alias="from")
    starttls: bool = False
    username: str | None = None
    password: str | None = None
    timeout: PositiveDuration = timedelta(seconds=30)


class SlackSettings(Section):
    """[slack]: approval cards and notifications in Slack."""

    mode: SlackMode = SlackMode.SOCKET
    bot_token: NonEmpty
    app_token: str | None = None
    signing_secret: str | None = None
    channel: NonEmpty
    api_url: str = "https://slack.com/api/"

    @field_validator("api_url")
    @classmethod
    def _slash(cls, value: str) -> str:
        # slack_sdk joins method names onto base_url, so the slash must be there.
        return value if value.endswith("/") else value + "/"

    @model_validator(mode="after")
    def _mode_needs(self) -> Self:
        if self.mode is SlackMode.SOCKET:
            if not self.app_token:
                raise problem("app_token", "required in socket mode (an 'xapp-...' token)")
            if not self.app_token.startswith("xapp-"):
                raise problem("app_token", "must be an app-level token starting with 'xapp-'")
        if self.mode is SlackMode.HTTP and not self.signing_secret:
            raise problem("signing_secret", "required in http mode")
        return self


class TelegramSettings(Section):
    """[telegram]: approval cards and notifications in Telegram."""

    mode: TelegramMode = TelegramMode.POLLING
    bot_token: NonEmpty
    chat_id: ChatId
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    webhook_secret: str | None = None
    webhook_url: str | None = None

    @field_validator("webhook_secret")
    @classmethod
    def _secret_charset(cls, value: str | None) -> str | None:
        # Telegram's setWebhook refuses other secrets; fail at startup, not at first use.
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", value):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, '_' and '-'")
        return value

    @model_validator(mode="after")
    def _mode_needs(self) -> Self:
        if self.mode is TelegramMode.WEBHOOK and not self.webhook_secret:
            raise problem("webhook_secret", "required in webhook mode")
        return self


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
    slack: SlackSettings | None = None
    telegram: TelegramSettings | None = None
    schedules: list[Schedule] = []
    oncall: OncallSettings = OncallSettings()
    notify: list[NotifySettings] = []
    mcp: McpSettings = McpSettings()

    @classmethod
    def default(cls) -> Settings:
        """The embedded defaults: SQLite in ./signoff-work, 127.0.0.1:8080, no chat."""
        return cls()

    @model_validator(mode="after")
    def _cross_checks(self) -> Self:
        found: list[tuple[str, str]] = []
        for kind, items in (("schedule", self.schedules), ("recipe", self.recipes)):
            names = [item.name for item in items]
            for i, name in enumerate(names):
                if name in names[:i]:
                    found.append((f"{kind}s[{i}].name", f"duplicate {kind} name {name!r}"))
        for i, target in enumerate(self.notify):
            if getattr(self, target.platform) is None:
                found.append(
                    (
                        f"notify[{i}].channel",
                        f"{target.platform} is not configured (add a [{target.platform}] section)",
                    )
                )
        if found:
            raise problems(found)
        return self

    def resolved_work_dir(self, work_dir_override: Path | None = None) -> Path:
        """The absolute work dir (relative paths are taken from the current directory)."""
        return (work_dir_override or self.daemon.work_dir).expanduser().resolve()

    def database_url(self, work_dir_override: Path | None = None) -> str:
        """The SQLAlchemy URL to use, with any SQLite path made absolute.

        A relative ``sqlite:///rel.db`` is resolved against the current working directory,
        not the config file's directory (see :func:`absolute_sqlite_url` for why).
        """
        if self.daemon.database is None:
            db = self.resolved_work_dir(work_dir_override) / "signoff.db"
            return f"sqlite:///{db}"
        return absolute_sqlite_url(self.daemon.database)


def load_settings(path: str | Path | None, *, environ: Mapping[str, str] | None = None) -> Settings:
    """Read, substitute and validate a config file; ``None`` gives the defaults.

    ``environ`` replaces ``os.environ`` for ``${ENV}`` substitution (tests, embedding).
    Raises :class:`ConfigError` naming the file, the key path and each problem.
    """
    if path is None:
        return Settings.default()
    source = Path(path)
    data, missing = substitute_env(read_toml(source), environ)
    if missing:
        raise ConfigError("\n".join(f"{source}: {key}: {msg}" for key, msg in missing))
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        lines = describe_errors(exc, Settings)
        raise ConfigError("\n".join(f"{source}: {line}" for line in lines)) from None


def check_config(path: str | Path | None) -> str:
    """Validate a config file and summarise it for ``signoff config check``."""
    settings = load_settings(path)
    where = path if path is not None else "(embedded defaults)"
    broken = [f"{where}: mcp.servers[{i}].command: {why}"
              for i, server in enumerate(settings.mcp.servers)
              if (why := command_problem(server)) is not None]
    if broken:
        raise ConfigError("\n".join(broken))
    surfaces = ["web"]
    if settings.slack is not None:
        surfaces.append(f"slack ({settings.slack.mode.value})")
    if settings.telegram is not None:
        surfaces.append(f"telegram ({settings.telegram.mode.value})")
    return "\n".join(
        [
            f"{path if path is not None else '(embedded defaults)'}: OK",
            f"database: {mask_url(settings.database_url())}",
            f"listen: {settings.daemon.host}:{settings.daemon.port}",
            f"surfaces: {', '.join(surfaces)}",
            f"schedules: {len(settings.schedules)}",
            f"rotations: {len(settings.oncall.rotations)}",
            f"mcp servers: {', '.join(map(describe_server, settings.mcp.servers)) or 'none'}",
        ]
    )
