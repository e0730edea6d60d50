"""The checks `daemon start` makes before it starts anything, in one place.

`signoff config check` runs exactly these, and `signoff handle` all but the listen
address. They go beyond the file's schema (`signoff.config`), which a file must pass
first: recipes' and schedules' steps and schedules' grants must name registered tools
with their required arguments, a non-loopback host or ``daemon.public_url`` needs an API
key (also when the host comes from ``--host``) and then every key must be long enough to
resist guessing (`MIN_KEY_CHARS`), and smart approval needs a judge endpoint. Every
problem is reported, one line each, naming the file and the key like the schema's errors:

    signoff.toml: recipes[0].steps[0]: unknown tool 'send_emial' (known tools: ...)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from signoff.config.fields import ApprovalMode
from signoff.config.mcp import command_problem, server_key
from signoff.config.settings import Settings, source_name
from signoff.errors import ConfigError, SignoffError
from signoff.local_user import tells_owners
from signoff.net import is_loopback
from signoff.runtime.models import Action, RiskClass
from signoff.runtime.policy.cedar import CedarPolicy
from signoff.runtime.state import why_unwritable
from signoff.runtime.store.sqlite.store import sqlite_path
from signoff.runtime.text import did_you_mean
from signoff.runtime.tools.registry import ToolRegistry, fingerprint

# Off loopback a key is all that stands between the internet and the decisions: 22
# characters of a random URL-safe key (secrets.token_urlsafe(16)) carry about 128 bits.
MIN_KEY_CHARS = 22
KEY_HINT = "python3 -c 'import secrets; print(secrets.token_urlsafe(24))'"


def grant_action(registry: ToolRegistry, spec: Mapping[str, Any]) -> Action:
    """The action a `[[schedules]] grants` entry pre-approves (tool + selector args)."""
    args = {k: v for k, v in spec.items() if k != "tool"}
    tool = registry.get(str(spec.get("tool")))
    known = {p.name for p in tool.params}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ConfigError(f"{tool.name} has no argument {', '.join(unknown)} "
                          f"(it takes {', '.join(sorted(known))})")
    # Only the fingerprint matters here: content arguments (subject, body) are neither
    # needed nor part of it, so required-argument checks do not apply.
    return Action(tool=tool.name, args=args, risk=tool.risk_for(args),
                  capability=tool.capability, fingerprint=fingerprint(tool, args))


def _steps(settings: Settings, registry: ToolRegistry) -> list[tuple[str, str]]:
    found = []
    steps = [(f"recipes[{i}]", r.steps) for i, r in enumerate(settings.recipes)]
    steps += [(f"schedules[{i}]", s.steps or []) for i, s in enumerate(settings.schedules)]
    for where, specs in steps:
        for j, step in enumerate(specs):
            try:  # the engine's own rule for a step: the registry's prepare
                registry.prepare(Action(tool=step.tool, args=dict(step.args)))
            except SignoffError as exc:
                found.append((f"{where}.steps[{j}]", str(exc)))
    for i, sched in enumerate(settings.schedules):
        for j, spec in enumerate(sched.grants):
            try:
                grant_action(registry, spec)
            except Exception as exc:  # a plugin's risk_for is not type-checked
                found.append((f"schedules[{i}].grants[{j}]", str(exc)))
    return found


def _schedule_prohibits(settings: Settings, registry: ToolRegistry) -> list[tuple[str, str]]:
    """A ``[[schedules]] prohibit`` entry that names no tool, capability or risk class
    here. Unlike ``policy.prohibit`` (a notice: it may be meant for outside requests), a
    schedule's prohibit only ever applies to that schedule's own runs, so such an entry
    is a typo that prohibits nothing, and the run would go on unattended without the limit
    its author wrote (``POST /tasks`` refuses the same entry with a 422). A name under a
    configured MCP server (``git.push``) is taken as is: its tools are listed later."""
    tools, known = set(registry.names()), _capabilities(settings, registry)
    servers = tuple(f"{server.name}." for server in settings.mcp.servers)
    risks = {r.value for r in RiskClass}
    found = []
    for i, sched in enumerate(settings.schedules):
        for j, entry in enumerate(sched.prohibit):
            word = entry.strip()
            if (word in tools or word in known or word.upper() in risks
                    or word.startswith(servers)):
                continue
            found.append((f"schedules[{i}].prohibit[{j}]",
                          f"{entry!r} is not a risk class, a tool or a capability here"
                          f"{did_you_mean(word, [*tools, *known])}, so it would prohibit "
                          "nothing"))
    return found


def problems(settings: Settings, registry: ToolRegistry, *, path: str | Path | None,
             host: str | None = None, serving: bool = True) -> list[str]:
    """Every problem, as ``file: key: what is wrong`` lines (empty when all is well).

    ``path`` is the file the settings came from (None: the embedded defaults); ``host``
    a ``--host`` given on the command line; ``serving=False`` (one-shot runs) skips the
    listen-address check.
    """
    source = source_name(path)
    lines = _exposure(settings, path=path, host=host) if serving else []
    planner = settings.planner
    if settings.approvals.mode is ApprovalMode.SMART and not (planner.base_url and planner.model):
        lines.append(f'{source}: approvals.mode: "smart" needs a judge endpoint: set [planner] '
                     'base_url and model (any OpenAI-compatible API), or use mode = "manual"')
    lines += [f"{source}: {key}: {message}" for key, message in _steps(settings, registry)]
    lines += [f"{source}: {key}: {message}"
              for key, message in _schedule_prohibits(settings, registry)]
    names = [server.name for server in settings.mcp.servers]
    lines += [f"{source}: {server_key(f'mcp.servers[{i}]', names)}.command: {why}"
              for i, server in enumerate(settings.mcp.servers)
              if (why := command_problem(server)) is not None]
    if settings.policy.cedar is not None:
        try:
            CedarPolicy.load(settings.policy.cedar)
        except ConfigError as exc:
            lines.append(f"{source}: policy.cedar: {exc}")
    why = passkey_problem(settings)
    if why is not None:
        lines.append(f"{source}: approvals.step_up_with: {why}")
    return lines


def passkey_problem(settings: Settings) -> str | None:
    """Why passkeys could never be used with this config, or None: browsers offer
    WebAuthn only on https (or on localhost), and a relying party is a host name, never
    an IP address (`signoff.runtime.passkeys.RelyingParty`)."""
    public = settings.daemon.public_url
    if settings.approvals.step_up_with != "passkey" or not public:
        return None
    parts = urlsplit(public)
    host = parts.hostname or ""
    if host != "localhost" and parts.scheme != "https":
        return (f'"passkey" needs daemon.public_url on https (browsers refuse passkeys on '
                f"{parts.scheme}:// except on localhost), not {public}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return (f'"passkey" needs daemon.public_url with a host name (a passkey\'s relying '
            f"party cannot be an IP address), not {public}")


def _exposure(settings: Settings, *, path: str | Path | None, host: str | None) -> list[str]:
    """A daemon reachable from other machines (its listen address or its public URL
    is not loopback) needs keys, and keys that cannot be guessed. Without a key the
    daemon answers only direct loopback requests, so a public URL (a reverse proxy in
    front) would be a console nobody can reach — or, worse, one everybody reaches."""
    source = source_name(path)
    listen = host or settings.daemon.host
    public = settings.daemon.public_url
    public_host = urlsplit(public).hostname if public else None
    keyed = bool(settings.api.key or settings.api.keys)
    in_file = f"in {path}" if path is not None else "in a config file (--config)"
    set_key = f"set [api] key {in_file} (e.g. key = \"${{SIGNOFF_API_KEY}}\")"
    lines = []
    if not keyed and not is_loopback(listen):
        where = f"--host {listen}" if host else f"{source}: daemon.host"
        lines.append(f"{where}: refusing to listen on {listen} without an API key: "
                     f"{set_key} or bind to 127.0.0.1")
    if not keyed and not settings.api.keyless_any_local_user and not tells_owners():
        lines.append(f"{source}: without an API key only the user the daemon runs as may "
                     f"decide, and this system cannot tell which local user opens a "
                     f"connection (no /proc/net/tcp): {set_key}, or set [api] "
                     f"keyless_any_local_user = true to let every account on this machine "
                     f"decide as web:local")
    if not keyed and public_host is not None and not is_loopback(public_host):
        lines.append(f"{source}: daemon.public_url: {public} is not on this machine, and a "
                     f"daemon without an API key answers only direct requests from this "
                     f"machine (never through a proxy): {set_key} or remove public_url")
    if keyed and not (is_loopback(listen) and (public_host is None
                                                or is_loopback(public_host))):
        lines += [f"{source}: {where}: the key of {name!r} is {len(key)} characters; off "
                  f"loopback every key must have at least {MIN_KEY_CHARS} (about 128 bits) "
                  f"— make one with {KEY_HINT}"
                  for where, name, key in _keys(settings) if len(key) < MIN_KEY_CHARS]
    return lines


def _keys(settings: Settings) -> list[tuple[str, str, str]]:
    """(config key, holder's name, key) of every API key."""
    found = [("api.key", "admin", settings.api.key)] if settings.api.key else []
    return found + [(f"api.keys[{i}].key", k.name, k.key) for i, k in enumerate(settings.api.keys)]


def _capabilities(settings: Settings, registry: ToolRegistry) -> set[str]:
    """Every capability a tool of this node can have (MCP tools before they are listed)."""
    known = {registry.get(name).capability for name in registry.names()}
    for server in settings.mcp.servers:
        known.add(f"mcp.{server.name}")
        known.update(t.capability for t in server.tools.values() if t.capability)
    return known


def _deciders(settings: Settings) -> set[str]:
    """Everyone who could ever decide a request of this config: the approvers, every
    on-call member or override and schedule approver, and one console/API identity per
    key (``web:local`` for the keyless loopback mode), one account per person
    (``[[people]]``: a person's accounts are one vote). An outside request's own
    approvers are not known here, so this is the most a quorum can count on."""
    people = set(settings.approvals.approvers)
    people.update(m for r in settings.oncall.rotations for m in r.members)
    people.update(o.who for o in settings.oncall.overrides)
    people.update(a for s in settings.schedules for a in (s.approvers or ()))
    names = (["admin"] if settings.api.key else []) + [k.name for k in settings.api.keys]
    people.update(f"web:{name}" for name in (names or ["local"]))
    return set(settings.who_is_who.distinct(sorted(people)))


def notices(settings: Settings, registry: ToolRegistry, *,
            path: str | Path | None) -> list[str]:
    """What is probably a mistake but may be meant, as ``file: key: …`` lines: printed by
    `signoff config check`, logged by ``daemon start``; neither refuses.

    A quorum larger than the number of people who could ever decide (`_deciders`) means
    its requests can only expire. A `[policy.quorum]` or `[policy.budgets]` key that is
    neither a risk class nor the capability of any tool here applies only to outside
    requests naming that capability (``POST /v1/approvals``): a misspelled "fs.delet"
    would silently leave deletions at one approver. Neither is refused: an outside
    agent's capability is its own to name, and who can decide may change with the
    on-call schedule's overrides and API keys.
    """
    source = source_name(path)
    known = _capabilities(settings, registry)
    risks = {r.value for r in RiskClass}
    lines = []
    people = _deciders(settings)
    for key, needed in settings.policy.quorum.items():
        if needed > len(people):
            lines.append(f"{source}: policy.quorum.{key}: needs {needed} distinct approvers, "
                         f"but only {len(people)} can ever decide here "
                         f"({', '.join(sorted(people)) or 'nobody'}): such a request can "
                         "only expire; list more approvers, API keys or on-call members")
    if settings.approvals.step_up_with == "passkey" and not settings.approvals.step_up:
        lines.append(f'{source}: approvals.step_up_with: "passkey" asks for a passkey only '
                     "for the risk classes in approvals.step_up, and it lists none: add "
                     'some (e.g. step_up = ["DESTRUCTIVE"])')
    for table, keys in (("quorum", settings.policy.quorum), ("budgets", settings.policy.budgets)):
        for key in keys:
            if key not in known and key.upper() not in risks:
                lines.append(f"{source}: policy.{table}.{key}: no tool here has capability "
                             f"{key!r}{did_you_mean(key, known)} and it is no risk class, "
                             f"so it applies only to outside requests that name it "
                             f"(capabilities here: {', '.join(sorted(known))})")
    return lines + _prohibited(settings, registry, source=source, known=known)


def _prohibited(settings: Settings, registry: ToolRegistry, *, source: str,
                known: set[str]) -> list[str]:
    """A ``policy.prohibit`` entry that names no tool, capability or risk class here
    prohibits nothing on this node: most often a misspelt tool name."""
    tools = registry.names()
    servers = tuple(f"{server.name}." for server in settings.mcp.servers)
    risks = {r.value for r in RiskClass}
    return [f"{source}: policy.prohibit[{i}]: unknown tool {entry!r}"
            f"{did_you_mean(entry, [*tools, *known])} (no tool, capability or risk class "
            "here is called so: it prohibits only outside requests that name it)"
            for i, entry in enumerate(settings.policy.prohibit)
            if entry not in tools and entry not in known and entry.upper() not in risks
            and not entry.startswith(servers)]


def storage(settings: Settings, *, path: str | Path | None) -> list[str]:
    """Where the config puts the state dir and a SQLite database that cannot be written,
    and why, as ``file: key: …`` lines (`signoff config check`; ``daemon start`` finds
    the same when it prepares them, after its ``--work-dir``/``--database`` overrides)."""
    source = source_name(path)
    places = [("daemon.state_dir", settings.resolved_state_dir())]
    database = sqlite_path(settings.database_url())
    if settings.daemon.database is not None and database is not None:
        places.append(("daemon.database", Path(database)))
    return [f"{source}: {key}: cannot write {where}: {why}"
            for key, where in places if (why := why_unwritable(where)) is not None]


def check(settings: Settings, registry: ToolRegistry, *, path: str | Path | None,
          host: str | None = None, serving: bool = True) -> None:
    """Raise one ConfigError listing every problem (see `problems`)."""
    found = problems(settings, registry, path=path, host=host, serving=serving)
    if found:
        raise ConfigError("\n".join(found))

