"""The README and the docs site as a reader meets them: short front door, no dead links,
a reference that names every command, config section, route and file it should."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A repository path written in backticks on a page: `signoff/bot/cards.py`, `tests/fakes/`.
REPO_PATH = re.compile(r"`((?:signoff|tests|bench|clients|contrib|docs)/[A-Za-z0-9_./-]*)`")


def gen_ref() -> ModuleType:
    """docs/gen_ref.py, the mkdocs hook that renders the generated reference."""
    spec = importlib.util.spec_from_file_location("gen_ref", DOCS / "gen_ref.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_ref", module)
    spec.loader.exec_module(module)
    return module


def nav_pages() -> list[str]:
    """Every page named in mkdocs.yml's nav, relative to docs/."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    return list(walk(config["nav"]))


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_the_readme_is_a_short_front_door() -> None:
    """README.md is at most 8 KB, with `make run` and `make test` in its first 40 lines."""
    assert README.stat().st_size <= 8192, f"README.md is {README.stat().st_size} bytes"
    head = "\n".join(README.read_text().splitlines()[:40])
    assert "make run" in head and "make test" in head


def test_the_readme_links_only_to_pages_that_exist() -> None:
    """Every relative link of the README leads to a file; every docs link to a site page."""
    pages = set(nav_pages())
    links = [t for t in LINK.findall(README.read_text()) if "://" not in t]
    assert links, "the README links to no page"
    for target in links:
        path = target.split("#")[0]
        assert (ROOT / path).exists(), f"README links to missing {target}"
        if path.startswith("docs/") and path.endswith(".md"):
            assert path.removeprefix("docs/") in pages, f"{target} is not in mkdocs.yml's nav"


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    """No page is left out of the site's navigation, and the nav names no missing page."""
    named = nav_pages()
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert set(named) == on_disk
    assert len(named) == len(set(named)), "a page is in the nav twice"


def test_the_cli_reference_names_every_command() -> None:
    """Every `signoff` command is in the CLI page's synopsis and in its generated part."""
    ref = gen_ref()
    names = [" ".join(path) for path, _ in ref.commands(ref.cli_root())]
    assert {"signoff daemon start", "signoff handle", "signoff config check",
            "signoff schedules run"} <= set(names)
    text = page("reference/cli.md")
    assert ref.CLI_MARK in text
    synopsis = text.split(ref.CLI_MARK)[0]
    generated = ref.cli_reference()
    for name in names:
        assert re.search(rf"^{re.escape(name)}\b", synopsis, re.M), f"{name} not in synopsis"
        assert f"### `{name}`" in generated and f"Usage: {name}" in generated, name


def test_the_config_reference_names_every_section_and_key() -> None:
    """Every config section (surfaces' included) is in the page's table and, with each of
    its keys, in the generated part."""
    ref = gen_ref()
    sections = ref.config_sections()
    titles = [title for title, _ in sections]
    assert {"[daemon]", "[approvals]", "[[schedules]]", "[slack]", "[telegram]",
            "[[mcp.servers]]"} <= set(titles)
    text = page("reference/configuration.md")
    assert ref.CONFIG_MARK in text
    table = text.split(ref.CONFIG_MARK)[0]
    generated = ref.config_reference()
    for title, model in sections:
        top = title.strip("[]").split(".")[0]
        assert re.search(rf"`\[\[?{re.escape(top)}[].]", table), f"[{top}] not in the table"
        assert f"### `{title}`" in generated, title
        body = generated.split(f"### `{title}`")[1].split("### ")[0]
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in body, (title, name)


async def test_the_http_api_page_names_every_route(tmp_path: Path) -> None:
    """Every route and method of the daemon's OpenAPI document is on the HTTP API page."""
    from tests.api.helpers import running_node

    async with running_node(tmp_path) as node, node.client() as client:
        schema = (await client.get("/openapi.json")).json()
    rows = page("reference/http-api.md").splitlines()
    for path, methods in schema["paths"].items():
        written = re.sub(r"\{[^}]+\}", "{id}", path)
        token = re.compile(re.escape(f"`{written}") + r"[`?]")
        for method in methods:
            assert any(method.upper() in row and token.search(row) for row in rows), \
                f"{method.upper()} {path} is not on reference/http-api.md"


@pytest.mark.parametrize("name", ["architecture.md", "extending.md", "benchmarks.md",
                                  "operations/index.md", "../CONTRIBUTING.md"])
def test_the_files_a_page_names_exist(name: str) -> None:
    """Each repository path a page names in backticks exists, so a move shows up here."""
    named = REPO_PATH.findall(page(name))
    assert named or name != "architecture.md"
    for path in named:
        assert (ROOT / path).exists(), f"{name} names {path}, which does not exist"


def test_the_tool_example_on_the_extending_page_is_a_working_tool() -> None:
    """The tool class shown under "Writing a tool" registers and prepares like any tool."""
    from signoff.runtime.models import Action, RiskClass
    from signoff.runtime.tools.registry import ToolRegistry

    text = page("extending.md").split("## Writing a tool")[1]
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    scope: dict[str, Any] = {}
    exec(compile(code, "extending.md", "exec"), scope)
    registry = ToolRegistry()
    registry.register(scope["TicketTool"]())
    action = registry.prepare(Action(tool="open_ticket", args={
        "project": "ops", "title": "disk full", "body": "…", "extra": 1}))
    assert action.risk is RiskClass.SEND and action.targets == ("ops",)
    assert action.args == {"project": "ops", "title": "disk full", "body": "…"}


def test_the_changelog_keeps_every_release_newest_first() -> None:
    """CHANGELOG.md starts with the unreleased version, then 0.2 and 0.1."""
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[:3] == ["0.3 (unreleased)", "0.2", "0.1"]
