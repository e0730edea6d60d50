"""Adding a surface touches only its own folder plus one registration: outside
``signoff/adapters/<name>/`` no code names a chat surface, and each surface is one line
of the ``signoff.surfaces`` entry-point group in pyproject.toml.

A new surface, say Discord, is then ``signoff/adapters/discord/`` (settings.py, plugin.py,
its platform) plus ``discord = "signoff.adapters.discord:PLUGIN"`` — or, from another
package, that package's own folder and pyproject (tests/plugins/signoff_echo_surface)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "signoff"
# The only mentions left outside the adapters, both kept for existing users.
ALLOWED = {
    "signoff/config/settings.py": "the typed Settings.slack / Settings.telegram properties",
    "signoff/runtime/tools/builtin/messaging.py": "post_message's channel examples for planners",
}


def code_words(path: Path) -> set[str]:
    """Names, attributes, imports and string constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.alias):
            words.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            words.add(node.module or "")
        elif isinstance(node, ast.arg):
            words.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words.add(node.name)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings):
            words.add(node.value)
    return words


def mentions(surface: str) -> set[str]:
    """The modules outside ``signoff/adapters/<surface>/`` whose code names ``surface``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith(f"signoff/adapters/{surface}/"):
            continue
        if any(re.search(surface, word, re.IGNORECASE) for word in code_words(path)):
            found.add(where)
    return found


def test_a_chat_surface_is_named_only_in_its_own_folder() -> None:
    """No code outside its adapter names Slack or Telegram, but the two kept mentions, and
    none at all names Discord, Teams, Web Push or ntfy."""
    for surface in ("slack", "telegram"):
        assert mentions(surface) <= set(ALLOWED), (surface, mentions(surface) - set(ALLOWED))
    assert mentions("discord") == set()
    assert mentions("teams") == set(), "a surface added since is named nowhere else"
    assert mentions("webpush") == set()
    assert mentions("ntfy") == set()


def test_a_surface_from_another_package_is_named_nowhere_in_signoff() -> None:
    """echo lives entirely in its own package: signoff's code never names it."""
    assert mentions("echo_surface") == set()
    assert not (PACKAGE / "adapters" / "echo").exists()


def test_each_surface_is_one_entry_point_into_its_own_package() -> None:
    """pyproject registers each built-in surface with one line, pointing into its folder."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    group = pyproject["project"]["entry-points"]["signoff.surfaces"]
    assert group == {name: f"signoff.adapters.{name}:PLUGIN"
                     for name in ("slack", "telegram", "web", "terminal", "email", "discord",
                                  "teams", "webpush", "ntfy")}
    for name in group:
        assert (PACKAGE / "adapters" / name / "plugin.py").exists()
