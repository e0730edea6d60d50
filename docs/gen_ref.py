"""The parts of the reference that the code already knows, rendered at build time.

A mkdocs hook (`hooks:` in mkdocs.yml): a page holding ``<!-- generated: cli -->`` gets
every `signoff` command with its options, read from the Typer app; one holding
``<!-- generated: config -->`` gets every config section and key with its type and
default, read from the settings models and the installed surfaces' own sections. So the
reference cannot drift from the code; `tests/unit/test_docs.py` checks that it covers
every command and section.

A page that is only ``<!-- include: NAME.md -->`` shows a file of the repository's root
(CHANGELOG.md, CONTRIBUTING.md: kept where people look for them), its links made relative
to the site.
"""

from __future__ import annotations

import enum
import re
import types
import typing
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

CLI_MARK = "<!-- generated: cli -->"
CONFIG_MARK = "<!-- generated: config -->"
INCLUDE = re.compile(r"<!-- include: ([A-Z]+\.md) -->")
ROOT = Path(__file__).resolve().parents[1]


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs hook: put the generated reference where a page asks for it."""
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    if CONFIG_MARK in markdown:
        markdown = markdown.replace(CONFIG_MARK, config_reference())
    return INCLUDE.sub(lambda m: root_file(m.group(1)), markdown)


def root_file(name: str) -> str:
    """A file of the repository's root as a page of the site: `docs/x.md` links become
    `x.md`, and links to the other root files their pages."""
    text = (ROOT / name).read_text(encoding="utf-8")
    text = text.replace("](docs/", "](")
    return text.replace("](CHANGELOG.md)", "](changelog.md)").replace(
        "](CONTRIBUTING.md)", "](contributing.md)")


# ---- the CLI ---------------------------------------------------------------------------

def cli_root() -> Any:
    """The `signoff` command tree exactly as the console script builds it (Typer's own
    click objects: read by their attributes, since Typer may ship its own click)."""
    from signoff.cli import main

    return main.command()


def commands(cmd: Any, path: tuple[str, ...] = ("signoff",)
             ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command that runs something, depth first, with its full name: a group is
    listed itself only when it runs without a subcommand (`signoff schedules`)."""
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield path, cmd
        return
    if len(path) > 1 and getattr(cmd, "invoke_without_command", False):
        yield path, cmd
    for name in sorted(subs):
        yield from commands(subs[name], (*path, name))


def cli_reference() -> str:
    """One section per command: its first line of help, then its `--help` as printed."""
    out: list[str] = []
    for path, cmd in commands(cli_root()):
        name = " ".join(path)
        out += [f"### `{name}`", "", _first_paragraph(cmd.help or ""), "",
                "```text", help_text(path[1:]), "```", ""]
    return "\n".join(out)


def help_text(args: tuple[str, ...]) -> str:
    """What `signoff ARGS --help` prints, without colour, at a fixed width."""
    from typer.testing import CliRunner

    from signoff.cli import main

    env = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb",
           "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
    result = CliRunner().invoke(main.app, [*args, "--help"], env=env, prog_name="signoff")
    if result.exit_code != 0:
        raise RuntimeError(f"signoff {' '.join(args)} --help failed: {result.output}")
    lines = [line.rstrip() for line in result.output.splitlines()]
    return "\n".join(lines).strip("\n")


def _first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split())


# ---- the config file -------------------------------------------------------------------

def config_sections() -> list[tuple[str, type[BaseModel]]]:
    """Every table of the config file, as written in TOML, with its model, in file order.

    The sections of `Settings`, their nested tables, then the installed surfaces' own
    sections (`[slack]`, `[telegram]`, a plug-in's).
    """
    from signoff.bot.plugins import surface_registry
    from signoff.config.settings import Settings

    found: list[tuple[str, type[BaseModel]]] = []
    for name, info in Settings.model_fields.items():
        found += _tables(name, info)
    for name, model in sorted(surface_registry().sections().items()):
        if name not in Settings.model_fields:
            found += _model_tables(f"[{name}]", name, model)
    return found


def _tables(key: str, info: FieldInfo) -> list[tuple[str, type[BaseModel]]]:
    model, many = _model_of(info.annotation)
    if model is None:
        return []
    return _model_tables(f"[[{key}]]" if many else f"[{key}]", key, model)


def _model_tables(title: str, key: str, model: type[BaseModel]
                  ) -> list[tuple[str, type[BaseModel]]]:
    found = [(title, model)]
    for name, info in model.model_fields.items():
        inner, many = _model_of(info.annotation)
        if inner is None:
            continue
        child = f"{key}.{name}"
        if many == "dict":
            child += ".<name>"
        found += _model_tables(f"[[{child}]]" if many == "list" else f"[{child}]", child, inner)
    return found


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds: itself (""), a list of it ("list") or a dict of it ("dict")."""
    for arg in _union_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg, ""
        origin = typing.get_origin(arg)
        args = typing.get_args(arg)
        if origin is list and args and _is_model(args[0]):
            return args[0], "list"
        if origin is dict and len(args) == 2 and _is_model(args[1]):
            return args[1], "dict"
    return None, ""


def _is_model(arg: Any) -> bool:
    return isinstance(arg, type) and issubclass(arg, BaseModel)


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def config_reference() -> str:
    """One table per config section: key, type and default."""
    out: list[str] = []
    for title, model in config_sections():
        out += [f"### `{title}`", ""]
        doc = _SECTION_PREFIX.sub("", _first_paragraph(model.__doc__ or ""))
        if doc:
            out += [doc[0].upper() + doc[1:], ""]
        out += ["| key | type | default |", "| --- | --- | --- |"]
        for name, info in model.model_fields.items():
            key = info.alias or name
            out.append(f"| `{key}` | {_cell(type_name(info.annotation))} | "
                       f"{_cell(_default(info))} |")
        out.append("")
    return "\n".join(out)


def type_name(annotation: Any) -> str:
    """A type as a config author reads it: `duration`, `manual | smart | off`, `list of …`."""
    parts = _union_args(annotation)
    optional = len(parts) != len(typing.get_args(annotation) or (annotation,)) \
        and typing.get_origin(annotation) in (typing.Union, types.UnionType)
    names = [_one_type(p) for p in parts]
    text = " or ".join(names)
    return f"{text} (optional)" if optional else text


def _one_type(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _one_type(args[0])
    if origin is list:
        return f"list of {_one_type(args[0])}" if args else "list"
    if origin is dict:
        return f"table of {_one_type(args[0])} → {_one_type(args[1])}" if args else "table"
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(f"`{m.value}`" for m in tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "table"
    if tp is Any:
        return "any"
    return _SIMPLE.get(tp, getattr(tp, "__name__", str(tp)))


_SECTION_PREFIX = re.compile(r"^`*\[+[\w.<>]+\]+`*:\s*")
_SIMPLE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                           timedelta: "duration", Path: "path"}


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "—"
    if isinstance(value, BaseModel):
        return "(table)"
    return f"`{_plain(value)}`"


def _plain(value: Any) -> Any:
    if isinstance(value, timedelta):
        return f'"{_duration(value)}"'
    if isinstance(value, enum.Enum):
        return f'"{value.value}"'
    if isinstance(value, str | Path):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(_plain(v)) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_plain(k)} = {_plain(v)}" for k, v in value.items()) + "}"
    return value


def _duration(td: timedelta) -> str:
    """The largest unit that writes ``td`` exactly ("30d", not "4w2d")."""
    ms = round(td.total_seconds() * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
