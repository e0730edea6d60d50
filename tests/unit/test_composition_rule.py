"""The composition root wires by constructor arguments only (issue 25).

`signoff.wiring`, the CLI and the embeddable Agent build objects in dependency order
and hand each what it needs when it is made. Setting an attribute of an object after it
was built (``notifier.on_flush = ...``, ``worker.gate = ...``) hid the order the parts
depend on, and a part used before its wire was set behaved as if unwired.
"""

from __future__ import annotations

import ast
from pathlib import Path

import signoff

ROOT = Path(signoff.__file__).parent
COMPOSITION = [*sorted((ROOT / "wiring").rglob("*.py")), *sorted((ROOT / "cli").rglob("*.py")),
               ROOT / "embed.py"]
# A store built elsewhere (tests, an embedding) has no signer; the node's key is the
# store's own setting, not a wire between two parts. Known, and the only one.
ALLOWED = {("node.py", "store.sealer.signer")}
# How a library's own objects are driven: uvicorn stops on ``should_exit``, click keeps
# a command's value in ``ctx.obj``, Typer reads a command's help panel, metavar and help
# text (the CLI joins the help's wrapped lines, `signoff.cli.main._unwrap_help`).
LIBRARY_ATTRIBUTES = {"should_exit", "obj", "rich_help_panel", "metavar", "help"}


def late_wires(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line target`` of each assignment to an attribute of anything but ``self``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets
                       for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            if isinstance(target.value, ast.Name) and target.value.id == "self":
                continue  # an object's own state
            if target.attr in LIBRARY_ATTRIBUTES:
                continue
            text = ast.unparse(target)
            if (path.name, text) not in ALLOWED:
                found.append(f"{path.relative_to(root)}:{node.lineno} {text}")
    return found


def test_the_composition_root_sets_no_attribute_of_an_object_it_built() -> None:
    """No ``x.attr = ...`` in the wiring, the CLI or embed.py: parts get their wires as
    constructor arguments (a cycle is broken by a shared object made before both)."""
    assert len(COMPOSITION) > 10  # the package and the CLI were found
    assert [hit for path in COMPOSITION for hit in late_wires(path)] == []


def test_the_check_sees_a_late_wire(tmp_path: Path) -> None:
    """The scan finds what it is for, in a plain or a tuple assignment, and leaves an
    object's own state alone."""
    source = tmp_path / "sample.py"
    source.write_text("def wire(a, b, self):\n    a.on_flush = b.wake\n"
                      "    self.x = 1\n    b.gate, c = a.room, 2\n")
    assert late_wires(source, tmp_path) == ["sample.py:2 a.on_flush", "sample.py:4 b.gate"]
