"""Validation helpers for :mod:`signoff.config.settings`: field types, ``${ENV}`` substitution,
cron and actor checks, and turning pydantic's errors into one line per problem.

Kept apart from the models so that ``config.py`` reads as the schema of the file and
this module as the rules behind it. Messages name the dotted key path the way a user
would write it (``schedules[1].cron``, ``policy.budgets."email.send"``).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import types
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationError,
)

from signoff.bot.plugins import surface_registry
from signoff.errors import ConfigError
from signoff.runtime.models import Risk
from signoff.runtime.schedule.durations import format_duration, parse_duration
from signoff.runtime.text import mask_url  # a database URL is printed as any URL is shown
from signoff.sections import KEYED, MULTI, NonEmpty, problem, problems

__all__ = [
    "ActorKey", "AwareDatetime", "DatabaseUrl", "Duration", "GrantTable", "Handoff",
    "HttpUrl", "NonEmpty", "NotifyChannel", "PositiveDuration", "Regex", "Risk", "TimezoneName",
    "absolute_sqlite_url", "check_actor", "check_channel", "check_cron", "describe_errors",
    "error_items", "join_path", "mask_secrets", "mask_url", "parse_handoff", "problem",
    "problems", "read_toml",
    "render_path", "substitute_env",
]  # fmt: skip

# ---------------------------------------------------------------- field types


def _to_timedelta(value: object) -> object:
    # Leave timedeltas (Python callers) alone; strings and numbers use our syntax, not
    # pydantic's ISO 8601 parsing, so "15m" means minutes everywhere.
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str | int | float):
        return parse_duration(value)
    raise ValueError(f"invalid duration {value!r} (use e.g. '30s', '15m', '2h')")


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta():
        raise ValueError("must be longer than 0s")
    return value


_AS_TEXT = PlainSerializer(format_duration, return_type=str, when_used="json")
Duration = Annotated[timedelta, BeforeValidator(_to_timedelta), _AS_TEXT]
"""A duration of zero or more ("0s" allowed), e.g. jitter."""
PositiveDuration = Annotated[
    timedelta, BeforeValidator(_to_timedelta), AfterValidator(_positive), _AS_TEXT
]
"""A duration that must be longer than zero: timeouts, periods, leases."""



def check_actor(value: str) -> str:
    """Accept ``<surface>:<user id>`` for each surface with chat users (``slack:U123``,
    ``telegram:42``), each surface's ids in its own syntax (`SurfacePlugin.user_id`)."""
    text = value.strip()
    people = [p for p in surface_registry().plugins.values() if p.user_id is not None]
    surface, _, user = text.partition(":")
    if not any(p.name == surface and re.fullmatch(str(p.user_id), user) for p in people):
        expected = " or ".join(p.approver_example or f"'{p.name}:<user id>'" for p in people)
        raise ValueError(f"invalid approver {value!r} (expected {expected})")
    return text


ActorKey = Annotated[str, AfterValidator(check_actor)]


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown timezone {value!r} (use an IANA name such as 'UTC' or 'Europe/Berlin')"
        ) from None
    return value


TimezoneName = Annotated[str, AfterValidator(_check_timezone)]




def _aware(value: datetime) -> datetime:
    # Naive times in the file mean UTC; naive datetimes are a bug everywhere else.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


AwareDatetime = Annotated[datetime, AfterValidator(_aware)]


def _grant(value: object) -> object:
    if not isinstance(value, dict) or not isinstance(value.get("tool"), str) or not value["tool"]:
        raise ValueError("a grant needs 'tool' (e.g. {tool = \"send_email\", to = [...]})")
    return value


GrantTable = Annotated[dict[str, Any], BeforeValidator(_grant)]
"""A standing grant of a schedule: ``tool`` plus selector keys (to, path, url, ...)."""


def _check_database(value: str) -> str:
    if not re.fullmatch(r"(sqlite(\+\w+)?:///|postgresql(\+\w+)?://).*", value, re.DOTALL):
        raise ValueError(
            "expected an SQLAlchemy URL such as 'sqlite:///signoff.db' or "
            "'postgresql+psycopg://user:pass@host/db'"
        )
    return value


DatabaseUrl = Annotated[str, AfterValidator(_check_database)]


def _check_http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")  # links are built as f"{base}/tasks/{id}"


HttpUrl = Annotated[str, AfterValidator(_check_http_url)]


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    return value


Regex = Annotated[str, Field(min_length=1), AfterValidator(_check_regex)]


def check_channel(value: str) -> str:
    """Accept ``<prefix>:<id>`` for a registered surface's channel prefix (``slack:C123``)."""
    plugins = surface_registry().channel_plugins()
    prefix, _, target = value.partition(":")
    if not target or re.search(r"\s", target) or all(p.channel_prefix != prefix for p in plugins):
        expected = " or ".join(p.channel_example or f"'{p.channel_prefix}:<channel>'"
                               for p in plugins)
        raise ValueError(f"invalid channel {value!r} (expected {expected})")
    return value


NotifyChannel = Annotated[str, AfterValidator(check_channel)]

_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HANDOFF = re.compile(rf"(?:({'|'.join(_WEEKDAYS)})\s+)?(\d{{1,2}}):(\d{{2}})")


def parse_handoff(value: str) -> tuple[int, time]:
    """``"mon 09:00"`` → ``(0, time(9, 0))``; weekday 0 = Monday, Monday if left out."""
    match = _HANDOFF.fullmatch(value.strip().lower())
    if match is None or int(match.group(2)) > 23 or int(match.group(3)) > 59:
        raise ValueError(f"invalid handoff {value!r} (expected e.g. 'mon 09:00')")
    day = _WEEKDAYS.index(match.group(1)) if match.group(1) else 0
    return day, time(int(match.group(2)), int(match.group(3)))


def _check_handoff(value: str) -> str:
    parse_handoff(value)
    return value.strip().lower()


Handoff = Annotated[str, AfterValidator(_check_handoff)]

# ---------------------------------------------------------------- cron

_CRON_FIELDS = ("minute", "hour", "day", "month", "weekday")
def check_cron(expr: str) -> str:
    """Validate a 5-field crontab line; return it with whitespace and case normalised."""
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    # Imported here: APScheduler is only needed when a schedule is configured.
    from apscheduler.triggers.cron import CronTrigger

    for name, value in zip(_CRON_FIELDS[:4], fields[:4], strict=True):
        try:
            CronTrigger(**{name: value}, timezone="UTC")
        except ValueError as exc:
            raise ValueError(f"invalid {name} field {value!r}: {exc}") from None
    # APScheduler counts 0 = Monday while crontab counts 0/7 = Sunday: the weekday field is
    # read by the runtime's own crontab parser, the one the scheduler fires with.
    from signoff.runtime.schedule.cron import crontab_weekdays

    crontab_weekdays(fields[4])
    return " ".join(fields).lower()


# ---------------------------------------------------------------- ${ENV} substitution

_REFERENCE = re.compile(r"(\$?)\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _substitute(text: str, env: Mapping[str, str], path: str, out: list[tuple[str, str]]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1):  # "$${X}" is the escape for a literal "${X}"
            return match.group(0)[1:]
        name, has_default, default = match.group(2).partition(":-")
        if not _ENV_NAME.fullmatch(name):
            out.append((path, f"invalid variable reference {match.group(0)!r}"))
            return ""
        value = env.get(name)
        # Shell semantics of ":-": an empty variable also takes the default.
        if value is None or (has_default and value == ""):
            if has_default:
                return default
            # A token or password wants its value exported, not a default written into
            # the file (where `config show` and a backup would carry it).
            last = path.rsplit(".", 1)[-1].lower()
            hint = (f"export {name}=… where the daemon starts"
                    if any(word in last for word in _SECRET_WORDS)
                    else f"set it, or write ${{{name}:-default}}")
            out.append((path, f"environment variable {name} is not set ({hint})"))
            return ""
        return value

    return _REFERENCE.sub(one, text)


def substitute_env(
    data: Any, env: Mapping[str, str] | None = None, path: str = ""
) -> tuple[Any, list[tuple[str, str]]]:
    """Replace ``${NAME}`` / ``${NAME:-default}`` in every string of parsed TOML.

    Returns the new data and a list of ``(key path, problem)`` for missing variables.
    """
    source = os.environ if env is None else env
    found: list[tuple[str, str]] = []

    def walk(value: Any, where: str) -> Any:
        if isinstance(value, str):
            return _substitute(value, source, where, found)
        if isinstance(value, dict):
            return {k: walk(v, join_path(where, render_path((k,)))) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    return walk(data, path), found


# ---------------------------------------------------------------- files and URLs


def read_toml(source: Path) -> dict[str, Any]:
    """Parse ``source``; every failure is a one-line :class:`ConfigError` naming the file."""
    try:
        with source.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory, not a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11 only puts the position in the text: "Invalid value (at line 3, ...)".
        text = str(exc)
        at = re.search(r"\(at (line \d+, column \d+|end of document)\)$", text)
        what = text[: at.start()].strip() if at else text
        where = f"{at.group(1)}: " if at else ""
        # tomllib's "Invalid value" is most often a string written without quotes.
        hint = (' (a string needs quotes: key = "value")'
                if what.lower().startswith("invalid value") else "")
        raise ConfigError(f"{source}: {where}invalid TOML: {what}{hint}") from None


def absolute_sqlite_url(url: str) -> str:
    """Make the path of a ``sqlite:///rel.db`` URL absolute; other URLs are unchanged.

    Relative paths are taken from the current working directory, as SQLAlchemy itself
    would, not from the config file's directory: the same string means the same file
    here and in every other tool it is handed to.
    """
    match = re.fullmatch(r"(sqlite(?:\+\w+)?:///)([^?]*)(\?.*)?", url, re.DOTALL)
    if match is None or match.group(2) in ("", ":memory:"):
        return url
    path = Path(match.group(2)).expanduser().resolve()
    return f"{match.group(1)}{path}{match.group(3) or ''}"


# ---------------------------------------------------------------- error reporting

_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_SECRET_WORDS = ("token", "secret", "password", "key")
MASKED = "***"


def mask_secrets(data: Any, name: str = "") -> Any:
    """``data`` (parsed or dumped settings) as it may be shown: the value of every key
    whose name says secret (token, secret, password, key) is ``***``, and every URL's
    user info and query values are masked (`mask_url`)."""
    if isinstance(data, Mapping):
        return {k: mask_secrets(v, str(k)) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [mask_secrets(v, name) for v in data]
    if isinstance(data, str) and data and any(w in name.lower() for w in _SECRET_WORDS):
        return MASKED
    if isinstance(data, str) and "://" in data:
        return mask_url(data)
    return data


def render_path(loc: tuple[int | str, ...]) -> str:
    """``("schedules", 1, "cron")`` → ``schedules[1].cron``; odd keys are TOML-quoted."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]":  # pydantic's marker for "the key itself was invalid"
            name = part if _BARE_KEY.fullmatch(part) else f'"{part}"'
            out = f"{out}.{name}" if out else name
    return out


def join_path(base: str, key: str) -> str:
    """Append a relative key path (``"app_token"``, ``"[2].name"``) to ``base``."""
    if not base or not key:
        return base or key
    return base + key if key.startswith("[") else f"{base}.{key}"


def _unwrap(tp: Any) -> Any:
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            rest = [a for a in get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _type_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> Any:
    """The declared type of the value at ``loc`` (unwrapped), or None when unknown."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str):
            fields = {(f.alias or n): f for n, f in tp.model_fields.items()}
            if part not in fields:
                return None
            tp = fields[part].annotation
        elif get_origin(tp) is list and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict and isinstance(part, str):  # e.g. mcp tool rules by name
            tp = get_args(tp)[1]
        else:
            return None
    return _unwrap(tp)


def _keys_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed at ``loc`` (the table holding an unknown key), in schema order."""
    tp = _type_at(root, loc)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [(f.alias or n) for n, f in tp.model_fields.items()]
    return []


def _unknown_key(err: Mapping[str, Any], root: type[BaseModel], top: Sequence[str]) -> str:
    loc = tuple(err["loc"])
    what = "section" if isinstance(err.get("input"), dict | list) else "key"
    allowed = _keys_at(root, loc[:-1]) + (list(top) if len(loc) == 1 else [])
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown {what} (did you mean '{close[0]}'?)"
    if allowed:
        return f"unknown {what} (expected one of: {', '.join(allowed)})"
    return f"unknown {what}"


def _explain(err: Mapping[str, Any], root: type[BaseModel], top: Sequence[str]) -> str:
    kind, msg = err["type"], str(err["msg"])
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        return _unknown_key(err, root, top)
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "assertion_error":
        return msg.removeprefix("Assertion failed, ")
    value, names = err.get("input"), [str(p) for p in err["loc"]]
    # pydantic names the Python class ("not a valid path for <class 'pathlib.Path'>",
    # "a valid dictionary or instance of DaemonSettings"), which says nothing to someone
    # editing a TOML file; name the TOML shape instead.
    if kind in {"path_type", "path_parsing"}:
        text = "should be a path (a string)"
    elif kind in {"model_type", "model_attributes_type", "dict_type"}:
        text = "should be a table (a [section] with key = value lines, or { key = value })"
    elif kind == "list_type":
        text = "should be a list in brackets"
        listed = _type_at(root, tuple(err["loc"]))
        item = _unwrap(get_args(listed)[0]) if get_origin(listed) is list else None
        # The value itself, bracketed, when the list holds strings (risk classes, approvers).
        if (isinstance(item, type) and issubclass(item, str) and isinstance(value, str)
                and '"' not in value):
            text += f', e.g. ["{value}"]'
    else:
        text = msg[:1].lower() + msg[1:]
    secret = any(word in name.lower() for name in names for word in _SECRET_WORDS)
    # Echo the offending scalar to help, but never a token or password.
    if isinstance(value, str | int | float | bool) and not secret:
        text += f", got {value!r}"
    return text


def error_items(exc: ValidationError, root: type[BaseModel], *, base: str = "",
                top: Sequence[str] = ()) -> list[tuple[str, str]]:
    """One ``(key path, problem)`` per error, without duplicates, in file order.

    ``base`` is where ``root`` sits in the file (``"slack"`` for a surface's section);
    ``top`` names further sections allowed beside ``root``'s own fields (the surfaces'),
    so that a misspelt one is told the closest real name.
    """
    items: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        at = join_path(base, render_path(tuple(err["loc"])))
        ctx = err.get("ctx") or {}
        if err["type"] == MULTI:
            found = [(join_path(at, k), m) for k, m in ctx["signoff_problems"]]
        elif err["type"] == KEYED:
            found = [(join_path(at, ctx["signoff_key"]), str(err["msg"]))]
        else:
            found = [(at, _explain(err, root, top))]
        items.extend(item for item in found if item not in items)
    return items


def describe_errors(exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """One ``key.path: problem`` line per error, without duplicates, in file order."""
    return [f"{path or '(top level)'}: {message}" for path, message in error_items(exc, root)]
