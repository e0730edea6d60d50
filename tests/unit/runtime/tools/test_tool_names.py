"""Tool names as a model sees them: one mapping to OpenAI's allowed function names, and
back through a table (a name the model invents maps to nothing)."""

from __future__ import annotations

import re

from signoff.runtime.tools.names import ModelTools, llm_name
from signoff.runtime.tools.registry import builtin_registry

ALLOWED = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def schema(name: str) -> dict[str, object]:
    return {"type": "function", "function": {"name": name, "description": "", "parameters": {}}}


def test_dotted_names_become_double_underscores_and_fit_the_pattern() -> None:
    """`git.git_status` is `git__git_status`; other characters become `_`; 64 at most."""
    assert llm_name("git.git_status") == "git__git_status"
    assert llm_name("send_email") == "send_email"
    for name in ("a b/c", "x" * 100, "ünïcode.tool", "", "srv.tool-1"):
        assert ALLOWED.match(llm_name(name)), name


def test_model_tools_offer_mapped_names_and_map_them_back() -> None:
    """Schemas carry the model's names; replies map back to registry names; unknown is None."""
    tools = ModelTools([schema("git.git_status"), schema("read_file")])
    assert [s["function"]["name"] for s in tools.schemas] == ["git__git_status", "read_file"]
    assert tools.tool("git__git_status") == "git.git_status"
    assert tools.tool("git.git_status") is None and tools.tool("launch") is None
    assert tools.names() == ["git__git_status", "read_file"]


def test_two_names_that_map_alike_keep_the_first() -> None:
    """A collision never lets the model reach the wrong tool: the first name keeps it."""
    tools = ModelTools([schema("a.b"), schema("a__b")])
    assert tools.tool("a__b") == "a.b" and len(tools.schemas) == 1


def test_every_builtin_is_offered_under_its_own_name() -> None:
    """The nine built-ins already fit the pattern and keep their names."""
    registry = builtin_registry(entry_points_group=None)
    tools = ModelTools(registry.schemas())
    assert tools.names() == registry.names()
