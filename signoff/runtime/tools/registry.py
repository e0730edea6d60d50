"""The tool registry: the one place that decides an action's risk, targets and fingerprint.

``prepare`` turns a planner's raw ``Action(tool, args)`` into what the policy judges: args
cut down to the tool's own parameters (planners add metadata such as ``query`` or
``name``, seed section 8), type-checked, and labelled with risk class, capability,
targets and the grant fingerprint. ``execute`` runs a prepared action and guarantees that
only :class:`~signoff.errors.ToolError` ever comes out of a tool.

Plugins register through the entry-point group ``signoff.tools``; a broken plugin is
logged and skipped, because one bad package must not stop the daemon from starting.
Tools that come and go with a server (MCP) are not registered one by one: their *source*
is added (:meth:`ToolRegistry.add_source`) and asked at each lookup.

A model sees every tool under :func:`~signoff.runtime.tools.names.llm_name`; a name it
sends back is resolved to the registry's own spelling here, in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Protocol, cast

from signoff.errors import BadArguments, ToolError, UnknownTool
from signoff.runtime.bounds import check_json
from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.models import Action, RiskClass
from signoff.runtime.text import did_you_mean
from signoff.runtime.tools.base import (
    DEFINITION,
    CheckedTool,
    Param,
    Preview,
    PreviewTool,
    RedefinableTool,
    SchemaTool,
    Tool,
    ToolContext,
    args_preview,
    content_names,
    is_a,
    said_of,
    summary_of,
)
from signoff.runtime.tools.builtin.fs import (
    DeleteFileTool,
    ListDirTool,
    ReadFileTool,
    WriteFileTool,
)
from signoff.runtime.tools.builtin.messaging import PostMessageTool, SendEmailTool
from signoff.runtime.tools.builtin.net import HttpGetTool, SendWebhookTool
from signoff.runtime.tools.builtin.shell import RunCommandTool
from signoff.runtime.tools.names import llm_name

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "signoff.tools"

_JSON_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    tuple: "array",
    dict: "object",
}


def _types(param: Param) -> tuple[type, ...]:
    return param.type if isinstance(param.type, tuple) else (param.type,)


def param_schema(param: Param) -> dict[str, Any]:
    """The JSON schema of one parameter (``object`` means any JSON value)."""
    names = [_JSON_TYPES[t] for t in _types(param) if t in _JSON_TYPES]
    schema: dict[str, Any] = {}
    if object not in _types(param) and names:
        schema["type"] = names[0] if len(names) == 1 else sorted(set(names))
    if param.description:
        schema["description"] = param.description
    return schema


def _type_ok(value: Any, param: Param) -> bool:
    allowed = _types(param)
    if object in allowed:
        return True
    # bool is an int to isinstance, but `true` for a count is a planner bug, not a 1.
    if isinstance(value, bool) and bool not in allowed:
        return False
    # JSON has one number type: accept 3 where 3.0 is expected.
    if float in allowed and isinstance(value, int):
        return True
    return isinstance(value, allowed)


def _type_names(param: Param) -> str:
    return " or ".join(_JSON_TYPES.get(t, t.__name__) for t in _types(param))


@dataclass(frozen=True)
class ToolInfo:
    """One line of `signoff tools`: a tool, its usual risk, capability and where it is from."""

    name: str
    risk: RiskClass
    capability: str
    source: str  # builtin | plugin | mcp:<server>

    def public(self) -> dict[str, str]:
        """The ``--json`` shape."""
        return {"name": self.name, "risk": self.risk.value, "capability": self.capability,
                "source": self.source}


_BLANK: dict[type, Any] = {str: "", list: [], tuple: [], dict: {}, int: 0, float: 0.0,
                          bool: False}


def usual_risk(tool: Tool) -> RiskClass:
    """A tool's risk class for an ordinary call (blank arguments).

    run_command answers DESTRUCTIVE here (a blank command is in no read-only list); a
    plugin whose risk cannot be worked out without real arguments is listed as
    DESTRUCTIVE, the honest worst case. An MCP tool's risk does not depend on arguments.
    """
    args = {p.name: _BLANK.get(_types(p)[0], "") for p in tool.params}
    try:
        return _as_risk(tool.risk_for(args))
    except Exception:  # a plugin's hook may raise anything for blank arguments
        return RiskClass.DESTRUCTIVE


class ToolSource(Protocol):
    """Tools that live elsewhere (an MCP server's): listed and found at each lookup."""

    def tools(self) -> list[Tool]:
        """The source's tools now."""
        ...

    def find(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        ...

    def source_of(self, name: str) -> str | None:
        """Where ``name`` comes from (``mcp:<server>``), None if not from this source."""
        ...


class ToolRegistry:
    """Tools by name, plus the rules that label and run actions."""

    def __init__(self, tools: Iterable[Tool] = (), *, source: str = "builtin") -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: dict[str, str] = {}  # tool name -> builtin | plugin
        self._providers: list[ToolSource] = []
        for tool in tools:
            self.register(tool, source=source)

    def register(self, tool: Tool, *, replace: bool = False, source: str = "plugin") -> None:
        """Add ``tool`` (from ``source``); a second tool with the same name is refused
        unless ``replace``."""
        if not isinstance(tool, Tool) or isinstance(tool, type):
            raise TypeError(f"{tool!r} is not a Tool instance")
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._sources[tool.name] = source

    def add_source(self, source: ToolSource) -> None:
        """Ask ``source`` too at every lookup (its tools may change while we run)."""
        self._providers.append(source)

    def listing(self) -> list[ToolInfo]:
        """Every tool, sorted by name, as `signoff tools` shows it."""
        out = []
        for name in self.names():
            tool = self.get(name)
            out.append(ToolInfo(name=name, risk=usual_risk(tool), capability=tool.capability,
                                source=self.source_of(name)))
        return out

    def _find(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        for source in self._providers:
            if tool is not None:
                break
            tool = source.find(name)
        return tool

    def get(self, name: str) -> Tool:
        """The tool called ``name`` (or the name a model sees for it); UnknownTool lists
        the known ones."""
        tool = self._find(name) or self._find(self.resolve(name))
        if tool is None:
            names = self.names()
            raise UnknownTool(f"unknown tool {name!r}{did_you_mean(name, names)} "
                              f"(known tools: {', '.join(names) or 'none'})")
        return tool

    def resolve(self, name: str) -> str:
        """The registry name of ``name``, which may be the name a model sees for it
        (``git__git_status`` → ``git.git_status``); unknown names come back unchanged."""
        if self._find(name) is not None:
            return name
        matches = [known for known in self.names() if llm_name(known) == name]
        return matches[0] if len(matches) == 1 else name

    def names(self) -> list[str]:
        """Tool names, sorted: registered ones and those of every source."""
        names = set(self._tools)
        for source in self._providers:
            names.update(tool.name for tool in source.tools())
        return sorted(names)

    def source_of(self, name: str) -> str:
        """``builtin``, ``plugin`` or ``mcp:<server>`` (for `signoff tools`)."""
        if name in self._sources:
            return self._sources[name]
        for source in self._providers:
            found = source.source_of(name)
            if found:
                return found
        raise UnknownTool(f"unknown tool {name!r}")

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._find(self.resolve(name)) is not None

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function-calling ``tools`` list for every tool, under the names a
        model may see (:func:`llm_name`)."""
        out = []
        for name in self.names():
            tool = self.get(name)
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": llm_name(tool.name),
                        "description": tool.description,
                        "parameters": tool_parameters(tool),
                    },
                }
            )
        return out

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Register the tools of installed plugins; returns the names that loaded.

        An entry point may name a Tool instance, a Tool class or a zero-argument factory.
        """
        loaded = []
        for ep in entry_points(group=group):
            try:
                tool = _load_tool(ep)
                self.register(tool, source="plugin")
            except Exception as exc:  # a plugin may raise anything; it must not stop us
                log.warning(
                    "tool_plugin_skipped",
                    extra={"entry_point": ep.name, "value": ep.value, "error": str(exc)},
                )
                continue
            log.info("tool_plugin_loaded", extra={"entry_point": ep.name, "tool": tool.name})
            loaded.append(tool.name)
        return loaded

    def clean_args(self, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` reduced to the tool's parameters and checked; BadArguments otherwise.

        A null optional argument counts as absent (planners often emit ``"cc": null``).
        A tool with a JSON schema (MCP) cleans and validates its own arguments. Arguments
        nested deeper than `bounds.MAX_DEPTH` are refused whatever the tool.
        """
        check_json(args, "args")
        if is_a(tool, SchemaTool):
            return cast(SchemaTool, tool).clean_args(args)
        clean: dict[str, Any] = {}
        for param in tool.params:
            value = args.get(param.name)
            if value is None:
                if param.required:
                    raise BadArguments(f"{tool.name}: missing required argument {param.name!r}")
                continue
            if not _type_ok(value, param):
                raise BadArguments(
                    f"{tool.name}: argument {param.name!r} must be {_type_names(param)}, "
                    f"not {type(value).__name__}"
                )
            clean[param.name] = value
        return clean

    def prepare(self, action: Action) -> Action:
        """Label ``action`` with filtered args, risk, capability, targets and fingerprint.

        The risk is the tool's for these args; a higher risk already on the action (set
        by a planner) is kept, a lower one is ignored.
        """
        tool = self.get(action.tool)
        args = self.clean_args(tool, action.args)
        try:
            risk = _as_risk(tool.risk_for(args))
            targets = tuple(str(t) for t in tool.targets(args))
            digest = fingerprint(tool, args)
            summary = summary_of(tool, args, targets)
        except ToolError:
            raise
        except Exception as exc:  # a plugin's hooks are not type-checked
            raise ToolError(f"{tool.name}: cannot label this call: {exc}") from exc
        if action.risk is not None and action.risk.rank > risk.rank:
            risk = action.risk
        return action.model_copy(
            update={
                "tool": tool.name,  # the registry's spelling, also when a model sent its own
                "args": args,
                "risk": risk,
                "capability": tool.capability,
                "targets": targets,
                "fingerprint": digest,
                "summary": summary,
                "content": content_names(tool),
                # Display only: the definition in the fingerprint binds the grant.
                "description": said_of(tool),
            }
        )

    def risk_for(self, action: Action) -> RiskClass:
        """The registry's own risk class for ``action`` (ignoring any risk it carries)."""
        tool = self.get(action.tool)
        return _as_risk(tool.risk_for(self.clean_args(tool, action.args)))

    async def check(self, action: Action, ctx: ToolContext) -> None:
        """Raise ToolError when ``action`` can never succeed, before anyone is asked.

        Arguments the tool rejects, then the tool's own ``check`` (see `CheckedTool`): a
        path or cwd outside the work dir, a channel no surface can reach.
        """
        tool = self.get(action.tool)
        args = self.clean_args(tool, action.args)
        if not is_a(tool, CheckedTool):
            return
        try:
            await cast(CheckedTool, tool).check(args, ctx)
        except ToolError:
            raise
        except Exception as exc:  # a plugin's hooks are not type-checked
            raise ToolError(f"{tool.name}: cannot check this call: {exc}") from exc

    async def preview(self, action: Action, ctx: ToolContext) -> Preview | None:
        """What ``action`` will do, in its tool's own words (`PreviewTool`), or None.

        Never raises: a card without a preview is better than no card, so bad arguments or
        a failing plugin hook give None. A tool the registry does not know (an outside
        request's own) gets the generic preview of its arguments. The hook may read the
        disk, hence the thread.
        """
        if action.tool not in self:
            # An outside request's own tool (a Hermes or Claude Code tool): all signoff
            # knows of it are its arguments, so the card shows them in full.
            return args_preview(action.args, action.content)
        try:
            tool = self.get(action.tool)
            if not isinstance(tool, PreviewTool):
                return None
            found = await asyncio.to_thread(tool.preview, self.clean_args(tool, action.args),
                                            ctx)
        except Exception:  # a plugin's hook is not type-checked
            log.warning("tool_preview_failed", extra={"tool": action.tool}, exc_info=True)
            return None
        return found if isinstance(found, Preview) else None

    async def execute(self, action: Action, ctx: ToolContext) -> dict[str, Any]:
        """Run ``action``'s tool; any failure comes out as a ToolError."""
        tool = self.get(action.tool)
        # Filter again: a stored action may predate a change of the tool's parameters.
        args = self.clean_args(tool, action.args)
        if action.fingerprint and is_a(tool, RedefinableTool) and not _as_shown(
                tool, args, action.fingerprint):
            raise ToolError(f"{tool.name}: its server changed the tool (what it says it "
                            f"does, its arguments or its hints) after this call was asked "
                            f"about, or no longer lists it; it was not run: ask again")
        if action.private_network:
            ctx = replace(ctx, private_ok=True)
        try:
            output = await tool.run(args, ctx)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"{tool.name} failed: {exc or type(exc).__name__}") from exc
        # Plugins are not type-checked: give callers the dict the contract promises.
        if output is None:
            return {}
        if not isinstance(output, dict):
            return {"result": output}
        return output


def tool_parameters(tool: Tool) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: its own (MCP) or built from its params."""
    if isinstance(tool, SchemaTool) and tool.input_schema is not None:
        return dict(tool.input_schema)
    if isinstance(tool, SchemaTool):
        return {"type": "object"}  # not known yet: the tool checks the arguments itself
    return {
        "type": "object",
        "properties": {p.name: param_schema(p) for p in tool.params},
        "required": [p.name for p in tool.params if p.required],
        "additionalProperties": False,
    }


def _as_shown(tool: Tool, args: dict[str, Any], shown: str) -> bool:
    """True when ``tool`` is still what the call fingerprinted ``shown`` was labelled
    with: the same definition, or none (asked while its server had not listed it, the
    card showed its name and arguments under conservative labels, and a person approved
    that). A Once on "look at a path (read-only)" never runs "delete the path"."""
    return shown in (fingerprint(tool, args), fingerprint(tool, args, unlisted=True))


def fingerprint(tool: Tool, args: dict[str, Any], *, unlisted: bool = False) -> str:
    """sha256 of the canonical JSON of the tool, its capability and its fingerprint fields
    (``unlisted``: as it was labelled before its server listed it, `RedefinableTool`)."""
    # The contract keeps message content out of every fingerprint; enforce it for plugins
    # too, so a grant can never be tied to (or leak through) one message's text.
    content = set(content_names(tool))
    fields = {k: v for k, v in tool.fingerprint_fields(args).items() if k not in content}
    if unlisted and DEFINITION in fields:
        fields[DEFINITION] = None
    return sha256_hex(
        canonical_json({"tool": tool.name, "capability": tool.capability, "fields": fields})
    )


def _as_risk(value: RiskClass | str) -> RiskClass:
    """Plugins may answer "SEND" instead of RiskClass.SEND; anything else is their bug."""
    return value if isinstance(value, RiskClass) else RiskClass.parse(str(value))


def _load_tool(ep: EntryPoint) -> Tool:
    obj = ep.load()
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Tool)):
        obj = obj()  # a Tool class, or a zero-argument factory
    if not isinstance(obj, Tool):
        raise TypeError(f"entry point {ep.name!r} gave {obj!r}, which is not a Tool")
    return obj


def builtin_tools(
    *, read_only_commands: Iterable[str] = (), work_dir: Path | None = None
) -> list[Tool]:
    """Fresh instances of the nine built-in tools."""
    return [
        ReadFileTool(work_dir=work_dir),
        ListDirTool(work_dir=work_dir),
        WriteFileTool(work_dir=work_dir),
        DeleteFileTool(work_dir=work_dir),
        HttpGetTool(),
        SendWebhookTool(),
        SendEmailTool(),
        PostMessageTool(),
        RunCommandTool(read_only_commands=frozenset(read_only_commands), work_dir=work_dir),
    ]


def builtin_registry(
    *,
    read_only_commands: Iterable[str] = (),
    work_dir: Path | None = None,
    entry_points_group: str | None = ENTRY_POINT_GROUP,
) -> ToolRegistry:
    """The nine built-ins plus installed plugins (``entry_points_group=None`` skips them).

    ``work_dir`` only makes absolute paths inside it fingerprint like relative ones.
    """
    registry = ToolRegistry(builtin_tools(read_only_commands=read_only_commands, work_dir=work_dir))
    if entry_points_group:
        registry.load_entry_points(entry_points_group)
    return registry
