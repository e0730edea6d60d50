"""One tool of an MCP server, as the registry sees it: name, risk, fingerprint, schema.

The labels come from the config, never from the server alone: a tool not listed under
``[mcp.servers.tools]`` gets the server's ``default_risk`` (DESTRUCTIVE unless configured).
A server's annotations (``readOnlyHint`` …) are hints the spec tells clients to distrust;
only a server with ``trust_annotations = true`` may make an unlisted tool READ, and no
annotation ever lowers a risk written in the config. Otherwise they are shown on the card,
marked as the server's own claim.

The arguments are checked against the tool's ``inputSchema`` (from ``tools/list``) with
jsonschema when the action is prepared, so a malformed call fails before a person is asked.
A tool known only by name because its server has not answered yet (it is starting, or down)
is a placeholder: conservative labels, no schema; it resolves to the listed tool when it runs.

A grant is for the tool a person was shown, not for whatever later answers to its name: a
call's fingerprint binds the tool's definition as the server listed it (description, input
schema, annotations), so a server that redefines a tool after an Always or a Session (a
"rug pull", after ``notifications/tools/list_changed`` or a restart) is asked about again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema
import jsonschema.exceptions

from signoff.errors import BadArguments, ToolError
from signoff.runtime.canonical import canonical_json, sha256_hex
from signoff.runtime.models import RiskClass
from signoff.runtime.text import shorten
from signoff.runtime.tools.base import (
    DEFINITION,
    Param,
    Preview,
    ToolContext,
    args_preview,
    told,
)
from signoff.runtime.tools.mcp.spec import McpServerSpec
from signoff.runtime.tools.names import mcp_tool_name

# The MCP annotations a person can read on a card, in the spec's order.
_HINTS = (
    ("readOnlyHint", "read-only", "not read-only"),
    ("destructiveHint", "destructive", "not destructive"),
    ("idempotentHint", "idempotent", "not idempotent"),
    ("openWorldHint", "reaches outside systems", "closed world"),
)
SUMMARY_ARGS = 6  # arguments named in a card's title; all of them are in the console
SUMMARY_VALUE = 60  # characters of one argument's value in the title


@dataclass(frozen=True)
class ListedTool:
    """One entry of a server's ``tools/list``, as plain data."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def digest(self) -> str:
        """sha256 of what the server says the tool is (description, input schema,
        annotations): what a grant for one of its calls is bound to."""
        said = {"description": self.description, "input_schema": self.input_schema,
                "annotations": self.annotations}
        # Not canonical_json: a server's schema may hold NaN, which that refuses; a digest
        # needs one spelling per value, not JSON another parser accepts.
        return sha256_hex(json.dumps(said, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False, default=str))


class McpServerPort(Protocol):
    """What a tool needs from its server's connection."""

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run ``tools/call``; a ToolError when the server is down or the tool failed."""
        ...

    async def listed(self, tool: str) -> McpTool:
        """The listed tool of that name, waiting for a starting server; ToolError if none."""
        ...


def hint_text(annotations: Mapping[str, Any], *, trusted: bool) -> str | None:
    """"read-only, not destructive … (the server's claim, not verified)", or None."""
    words = [yes if annotations[key] else no for key, yes, no in _HINTS
             if isinstance(annotations.get(key), bool)]
    if not words:
        return None
    source = "trusted server" if trusted else "the server's claim, not verified"
    return f"{', '.join(words)} ({source})"


class McpTool:
    """A tool of one MCP server, labelled by the server's ``[[mcp.servers]]`` entry."""

    def __init__(self, spec: McpServerSpec, listed: ListedTool, server: McpServerPort, *,
                 placeholder: bool = False) -> None:
        self.spec = spec
        self.tool = listed.name  # the server's own name for it
        self.name = mcp_tool_name(spec.name, listed.name)
        self.rule = spec.rule(listed.name)
        self.capability = (self.rule.capability if self.rule and self.rule.capability
                           else spec.capability)
        self.description = listed.description or f"{listed.name} (MCP server {spec.name})"
        # The server's own words only (none for a placeholder or a tool it left
        # undescribed): what a card quotes as its claim.
        self.said = told(listed.description)
        self.annotations = dict(listed.annotations)
        # Message content: shown on the card, never part of a fingerprint or grant.
        self.content: tuple[str, ...] = self.rule.content if self.rule else ()
        self.placeholder = placeholder
        # What the server said the tool is (None for a placeholder: nothing said yet).
        self.definition: str | None = None if placeholder else listed.digest()
        self.input_schema: dict[str, Any] | None = (
            dict(listed.input_schema) if listed.input_schema is not None else None)
        self._server = server
        self._validator: Any = None
        self._schema_error: str | None = None
        if self.input_schema is not None:
            try:
                cls = jsonschema.validators.validator_for(self.input_schema)
                cls.check_schema(self.input_schema)
                self._validator = cls(self.input_schema)
            except jsonschema.exceptions.SchemaError as exc:
                self._schema_error = exc.message
        self.params = self._params()

    def _params(self) -> tuple[Param, ...]:
        schema = self.input_schema or {}
        required = set(schema.get("required") or ())
        props = schema.get("properties") or {}
        return tuple(Param(name, object, required=name in required,
                           description=str((prop or {}).get("description") or ""))
                     for name, prop in props.items())

    # -- labels ----------------------------------------------------------------------
    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        if self.rule is not None and self.rule.risk is not None:
            return self.rule.risk  # written in the config: no annotation lowers it
        if self.spec.trust_annotations and self.annotations.get("readOnlyHint") is True:
            return RiskClass.READ
        return self.spec.default_risk

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        out: list[str] = []
        for key in self.rule.targets if self.rule else ():
            value = args.get(key)
            values = value if isinstance(value, list | tuple) else [value]
            out.extend(v if isinstance(v, str) else canonical_json(v)
                       for v in values if v is not None)
        return tuple(out)

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        # Nested under "args": the registry drops top-level message keys of built-ins
        # (text, content …), but for an MCP tool only its configured `content` is content.
        # The definition too: an Always for "look at a path (read-only)" must not cover
        # the same name once the server says it deletes the path.
        kept = {k: v for k, v in args.items() if k not in self.content}
        return {"args": kept, "targets": list(self.targets(args)),
                DEFINITION: self.definition}

    def summary(self, args: dict[str, Any]) -> str:
        """The card's title: the call, its other arguments, and the server's own hints."""
        targets = self.targets(args)
        text = f"Run {self.name}" + (f" on {', '.join(targets)}" if targets else "")
        named = set(self.rule.targets if self.rule else ()) | set(self.content)
        rest = [f"{key}={shorten(value, SUMMARY_VALUE)}" for key, value in args.items()
                if key not in named][:SUMMARY_ARGS]
        if rest:
            text += f" with {', '.join(rest)}"
        hints = hint_text(self.annotations, trusted=self.spec.trust_annotations)
        return f"{text} — server hints: {hints}" if hints else text

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview | None:
        """Every argument in full (the title names only a few, shortened): an MCP tool
        cannot say more about what a call does than what it is sent."""
        return args_preview(args, self.content)

    # -- arguments -------------------------------------------------------------------
    def clean_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` cut to the schema's properties and validated; BadArguments otherwise.

        Unknown arguments are dropped (as for built-ins) unless the schema allows extra
        ones; a null optional argument counts as absent.
        """
        schema = self.input_schema
        if schema is None:  # a placeholder: checked against the real schema when it runs
            return {k: v for k, v in args.items() if v is not None}
        if self._schema_error is not None:
            raise ToolError(f"{self.name}: the server's input schema is invalid: "
                            f"{self._schema_error}")
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        extra = schema.get("additionalProperties")
        keep_all = not props or (extra is not None and extra is not False)
        clean = {k: v for k, v in args.items()
                 if (keep_all or k in props) and not (v is None and k not in required)}
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(clean))
        if error is not None:
            where = ".".join(str(p) for p in error.absolute_path)
            prefix = f"argument {where!r}: " if where else ""
            raise BadArguments(f"{self.name}: {prefix}{error.message}")
        return clean

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        if self.placeholder:
            listed = await self._server.listed(self.tool)
            args = listed.clean_args(args)
        return await self._server.call(self.tool, args)
