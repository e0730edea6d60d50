"""How an MCP tool is labelled from its config and its listing: risk, capability, targets,
fingerprint, argument checks and the names a model sees (no server needed)."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from signoff.errors import BadArguments, ToolError
from signoff.runtime.models import Action, RiskClass
from signoff.runtime.tools.base import DESCRIPTION_MAX
from signoff.runtime.tools.mcp import ListedTool, McpServerSpec, McpTool, McpToolRule
from signoff.runtime.tools.mcp.connection import tool_output
from signoff.runtime.tools.names import llm_name, split_mcp_name
from signoff.runtime.tools.registry import ToolRegistry, builtin_registry

SCHEMA = {"type": "object", "required": ["repo_path", "message"],
          "properties": {"repo_path": {"type": "string"}, "message": {"type": "string"},
                         "amend": {"type": "boolean"}}}
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False}


class NoServer:
    """Labels never talk to the server; running a tool is tested against real servers."""

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not called")

    async def listed(self, tool: str) -> McpTool:
        raise AssertionError("not called")


def make(rule: McpToolRule | None = None, *, trust: bool = False,
         annotations: dict[str, Any] | None = None, schema: Any = SCHEMA,
         default: RiskClass = RiskClass.DESTRUCTIVE) -> McpTool:
    spec = McpServerSpec(name="git", command=("git-server",), default_risk=default,
                         trust_annotations=trust,
                         tools={"git_commit": rule} if rule else {})
    listed = ListedTool(name="git_commit", input_schema=schema, annotations=annotations or {})
    return McpTool(spec, listed, NoServer())


def registry_with(tool: McpTool) -> ToolRegistry:
    class Source:
        def tools(self) -> list[McpTool]:
            return [tool]

        def find(self, name: str) -> McpTool | None:
            return tool if name == tool.name else None

        def source_of(self, name: str) -> str | None:
            return "mcp:git" if name == tool.name else None

    registry = builtin_registry(entry_points_group=None)
    registry.add_source(Source())
    return registry


ARGS = {"repo_path": "/srv/a", "message": "fix"}


def test_an_unlisted_tool_gets_the_default_risk_and_capability() -> None:
    """No rule: DESTRUCTIVE (the default default_risk) and capability mcp.<server>."""
    tool = make()
    assert tool.name == "git.git_commit"
    assert tool.risk_for(ARGS) is RiskClass.DESTRUCTIVE
    assert tool.capability == "mcp.git"


def test_a_configured_default_risk_applies_to_unlisted_tools() -> None:
    """default_risk = SEND labels every unlisted tool SEND."""
    assert make(default=RiskClass.SEND).risk_for(ARGS) is RiskClass.SEND


def test_untrusted_read_only_hints_are_ignored_for_the_risk() -> None:
    """readOnlyHint from an untrusted server does not make the tool READ."""
    assert make(annotations=READ_ONLY).risk_for(ARGS) is RiskClass.DESTRUCTIVE


def test_trusted_read_only_hints_make_an_unlisted_tool_read() -> None:
    """trust_annotations: readOnlyHint=true → READ."""
    assert make(annotations=READ_ONLY, trust=True).risk_for(ARGS) is RiskClass.READ


def test_hints_never_lower_a_configured_risk() -> None:
    """A rule's risk stands even against a trusted read-only hint."""
    tool = make(McpToolRule(risk=RiskClass.SEND), annotations=READ_ONLY, trust=True)
    assert tool.risk_for(ARGS) is RiskClass.SEND


def test_a_rule_sets_capability_and_targets() -> None:
    """capability and targets come from the rule; list values give one target each."""
    tool = make(McpToolRule(capability="git.write", targets=("repo_path", "files")))
    assert tool.capability == "git.write"
    assert tool.targets({"repo_path": "/srv/a", "files": ["x", "y"]}) == ("/srv/a", "x", "y")


def test_the_fingerprint_covers_every_argument_but_the_content_ones() -> None:
    """message (content) does not change the fingerprint; repo_path and amend do."""
    registry = registry_with(make(McpToolRule(targets=("repo_path",), content=("message",))))
    base = registry.prepare(Action(tool="git.git_commit", args=ARGS)).fingerprint
    other_text = registry.prepare(Action(tool="git.git_commit",
                                         args={**ARGS, "message": "other"})).fingerprint
    other_repo = registry.prepare(Action(tool="git.git_commit",
                                         args={**ARGS, "repo_path": "/srv/b"})).fingerprint
    amend = registry.prepare(Action(tool="git.git_commit",
                                    args={**ARGS, "amend": True})).fingerprint
    assert base == other_text
    assert len({base, other_repo, amend}) == 3


def test_an_argument_named_text_is_in_the_fingerprint_unless_configured_content() -> None:
    """Built-ins' content names (text, body …) are not content for an MCP tool by default."""
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    registry = registry_with(make(schema=schema))
    one = registry.prepare(Action(tool="git.git_commit", args={"text": "a"})).fingerprint
    two = registry.prepare(Action(tool="git.git_commit", args={"text": "b"})).fingerprint
    assert one != two


def test_arguments_are_validated_against_the_input_schema() -> None:
    """A missing required argument or a wrong type is BadArguments naming it."""
    tool = make()
    with pytest.raises(BadArguments, match="'message' is a required property"):
        tool.clean_args({"repo_path": "/srv/a"})
    with pytest.raises(BadArguments, match="argument 'amend'"):
        tool.clean_args({**ARGS, "amend": "yes"})


def test_unknown_arguments_are_dropped_and_null_optionals_are_absent() -> None:
    """Extra keys a planner adds are dropped; "amend": null is left out."""
    assert make().clean_args({**ARGS, "query": "x", "amend": None}) == ARGS


def test_a_schema_that_allows_extra_arguments_keeps_them() -> None:
    """additionalProperties: true keeps keys outside properties."""
    schema = {**SCHEMA, "additionalProperties": True}
    assert make(schema=schema).clean_args({**ARGS, "x": 1}) == {**ARGS, "x": 1}


def test_an_invalid_schema_from_the_server_fails_the_action() -> None:
    """A broken inputSchema is a ToolError, never an unchecked call."""
    tool = make(schema={"type": "object", "properties": {"a": {"type": 5}}})
    with pytest.raises(ToolError, match="input schema is invalid"):
        tool.clean_args({"a": 1})


def test_the_summary_names_targets_other_arguments_and_hints() -> None:
    """Targets after "on", other non-content arguments after "with", then the hints."""
    tool = make(McpToolRule(targets=("repo_path",), content=("message",)),
                annotations=READ_ONLY)
    assert tool.content == ("message",)
    assert tool.summary({**ARGS, "amend": True}) == (
        "Run git.git_commit on /srv/a with amend=true — server hints: read-only, "
        "not destructive (the server's claim, not verified)")
    trusted = make(annotations=READ_ONLY, trust=True)
    assert trusted.summary(ARGS).endswith("(trusted server)")


def test_prepared_actions_carry_the_summary_and_the_content_names() -> None:
    """The registry puts the tool's summary and content names on the action for cards."""
    registry = registry_with(make(McpToolRule(targets=("repo_path",), content=("message",))))
    action = registry.prepare(Action(tool="git.git_commit", args=ARGS))
    assert action.summary == "Run git.git_commit on /srv/a"
    assert action.content == ("message",)


def test_model_names_have_no_dots_and_resolve_back() -> None:
    """git.git_commit ↔ git__git_commit; built-in names are unchanged."""
    assert llm_name("git.git_commit") == "git__git_commit"
    assert llm_name("read_file") == "read_file"
    assert llm_name("srv.a.b c") == "srv__a_b_c"
    assert split_mcp_name("git.git_commit") == ("git", "git_commit")
    assert split_mcp_name("read_file") is None
    registry = registry_with(make())
    assert registry.resolve("git__git_commit") == "git.git_commit"
    assert "git__git_commit" in registry
    assert registry.resolve("nope") == "nope"


def test_the_listing_names_each_tools_source() -> None:
    """builtin for the nine, mcp:<server> for a server's tools, with their usual risk."""
    registry = registry_with(make(McpToolRule(risk=RiskClass.SEND, capability="git.write")))
    rows = {info.name: info.public() for info in registry.listing()}
    assert rows["git.git_commit"] == {"name": "git.git_commit", "risk": "SEND",
                                      "capability": "git.write", "source": "mcp:git"}
    assert rows["read_file"]["source"] == "builtin"
    assert rows["run_command"]["risk"] == "DESTRUCTIVE"


def test_a_result_nested_too_deep_is_kept_without_its_structured_part() -> None:
    """An MCP server's structured result deeper than 32 levels is dropped from the task's
    record (which must stay readable) with a note; its text and a shallow result stay."""
    deep: Any = "x"
    for _ in range(100):
        deep = {"a": deep}
    text = [types.TextContent(type="text", text="done")]
    out = tool_output("git.x", types.CallToolResult(content=text, structured_content=deep))
    assert out["text"] == "done" and "structured" not in out
    assert "32 levels" in out["structured_dropped"]
    shallow = {"a": {"b": [1, 2]}}
    kept = tool_output("git.x", types.CallToolResult(content=text, structured_content=shallow))
    assert kept["structured"] == shallow


def test_a_prepared_call_carries_the_servers_description_outside_its_fingerprint() -> None:
    """`registry.prepare` gives the action the tool's description as its server listed
    it (for the card); a placeholder, which nothing has described yet, gives none, and
    neither does a built-in tool (its card speaks in its own summary)."""
    spec = McpServerSpec(name="git", command=("git-server",))
    listed = ListedTool(name="git_commit", description="Commit the staged changes.",
                        input_schema=SCHEMA)
    action = registry_with(McpTool(spec, listed, NoServer())).prepare(
        Action(tool="git.git_commit", args=ARGS))
    assert action.description == "Commit the staged changes."
    placeholder = McpTool(spec, ListedTool(name="git_commit"), NoServer(), placeholder=True)
    unlisted = registry_with(placeholder).prepare(Action(tool="git.git_commit", args=ARGS))
    assert unlisted.description is None
    built_in = builtin_registry(entry_points_group=None).prepare(
        Action(tool="read_file", args={"path": "a.txt"}))
    assert built_in.description is None


def test_a_servers_long_or_garbled_description_is_kept_bounded_on_each_call() -> None:
    """A server may list a description of any length and bytes: each prepared call (and
    so each stored task step) carries its first DESCRIPTION_MAX characters, control
    characters left out; one of control characters only is no description."""
    spec = McpServerSpec(name="git", command=("git-server",))
    huge = "Commit\x1b[31m the staged changes. " + "x" * 50_000
    action = registry_with(McpTool(spec, ListedTool(name="git_commit", description=huge,
                                                    input_schema=SCHEMA), NoServer())
                           ).prepare(Action(tool="git.git_commit", args=ARGS))
    assert action.description is not None and len(action.description) == DESCRIPTION_MAX
    assert action.description.startswith("Commit[31m the staged changes.")
    blank = registry_with(McpTool(spec, ListedTool(name="git_commit", description="\x00\x07",
                                                   input_schema=SCHEMA), NoServer())
                          ).prepare(Action(tool="git.git_commit", args=ARGS))
    assert blank.description is None
