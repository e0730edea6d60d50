"""How one Claude Code tool call is put to signoff: the one mapping of Claude Code's tools.

`ask_for(tool_name, tool_input, project_dir)` is a plain function (no I/O but looking at
the file system for where a path really is) that both ``signoff mcp-permission`` and a
``PreToolUse`` hook use. It answers a `ClaudeAsk`: the name the daemon is asked about,
the risk class, the targets, which arguments are content (so the rest is the
fingerprint) and the card's words.

The table is :data:`CLAUDE_TOOLS` (Claude Code 2.1's built-in tools; `tool_table` renders
it for the docs). Rules on top of it:

* files are placed by `signoff_client.places` on their resolved path: a write inside the
  project is DRAFT, a write anywhere else (through a symlink too) or to the project's git,
  CI, hook or agent-settings files is DESTRUCTIVE; a read outside the project is SEND
  (its content may leave with the model's next message), so a person is asked;
* ``Bash`` is signoff's own ``run_command`` (the exact command, the project as cwd), so
  ``policy.read_only_commands`` applies; with ``dangerouslyDisableSandbox`` or
  ``run_in_background`` set it is ``claude.Bash``, DESTRUCTIVE, with both flags in its
  fingerprint and on its card;
* ``mcp__<server>__<tool>`` is ``<server>.<tool>`` (labelled by the daemon's
  ``[[mcp.servers]]`` when it knows that server, else DESTRUCTIVE);
* any other tool is DESTRUCTIVE with every argument in its fingerprint.
"""

from __future__ import annotations

import glob
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from signoff_client.places import Place, Placed, placed


@dataclass(frozen=True)
class Label:
    """How one Claude Code tool is asked about: its risk for work inside the project."""

    risk: str
    capability: str
    targets: tuple[str, ...] = ()
    content: tuple[str, ...] = ()
    write: bool = False  # its ``paths`` are written: DESTRUCTIVE unless inside the project
    paths: tuple[str, ...] = ()  # target arguments that are files (placed on their real path)
    note: str = ""  # what the card says about every call


def _writes(arg: str, *content: str) -> Label:
    return Label("DRAFT", "fs.write", (arg,), content, write=True, paths=(arg,))


def _reads(*targets: str, content: tuple[str, ...] = (), paths: tuple[str, ...] = ()
           ) -> Label:
    return Label("READ", "fs.read", targets, content, paths=paths or targets[:1])


def _agent(capability: str, *targets: str, content: tuple[str, ...] = ()) -> Label:
    return Label("READ", capability, targets, content)


CLAUDE_TOOLS: dict[str, Label] = {
    "Write": _writes("file_path", "content"),
    "Edit": _writes("file_path", "old_string", "new_string", "replace_all"),
    "MultiEdit": _writes("file_path", "edits"),
    "NotebookEdit": _writes("notebook_path", "new_source", "cell_id", "cell_type",
                            "edit_mode"),
    "Read": _reads("file_path", content=("offset", "limit", "pages")),
    "NotebookRead": _reads("notebook_path"),
    "LS": _reads("path"),
    "Glob": _reads("path", "pattern", paths=("path", "pattern")),
    "Grep": _reads("path", "pattern", "glob"),
    "WebFetch": Label("SEND", "net.fetch", ("url",), ("prompt",),
                      note="fetches a web page: the URL can carry data out"),
    "WebSearch": Label("READ", "net.search", ("query",)),
    "Agent": _agent("agent.task", "subagent_type", content=("description", "prompt")),
    "Task": _agent("agent.task", "subagent_type", content=("description", "prompt")),
    "TodoWrite": _agent("agent.todo", content=("todos",)),
    "TaskCreate": _agent("agent.todo", content=("subject", "description", "activeForm")),
    "TaskGet": _agent("agent.todo", "taskId"),
    "TaskList": _agent("agent.todo"),
    "TaskUpdate": _agent("agent.todo", "taskId", content=("subject", "description",
                                                          "activeForm")),
    "BashOutput": _agent("exec.read", "bash_id", content=("filter",)),
    "TaskOutput": _agent("exec.read", "task_id"),
    "KillShell": Label("DRAFT", "exec.stop", ("shell_id",)),
    "KillBash": Label("DRAFT", "exec.stop", ("shell_id",)),
    "TaskStop": Label("DRAFT", "exec.stop", ("task_id",)),
    "AskUserQuestion": _agent("agent.ask", content=("questions",)),
    "EnterPlanMode": _agent("agent.plan"),
    "ExitPlanMode": Label("SEND", "agent.plan", (), ("plan",),
                          note="Claude Code asks to leave plan mode and carry out its plan"),
    "ToolSearch": _agent("agent.tools", "query"),
    "ListMcpResourcesTool": _agent("mcp.read", "server"),
    "ReadMcpResourceTool": _agent("mcp.read", "server", "uri"),
    "SlashCommand": Label("DESTRUCTIVE", "agent.command", ("command",)),
    "Skill": Label("DESTRUCTIVE", "agent.skill", ("skill",)),
    "PowerShell": Label("DESTRUCTIVE", "exec.shell", ("command",), ("description", "timeout")),
}
BASH_FLAGS = ("dangerouslyDisableSandbox", "run_in_background")
_FLAG_WORDS = {"dangerouslyDisableSandbox": "the sandbox is DISABLED for this command",
               "run_in_background": "runs in the background"}


@dataclass(frozen=True)
class ClaudeAsk:
    """What the daemon is asked about one Claude Code tool call."""

    tool: str
    args: dict[str, Any]
    risk: str | None  # None: the daemon's own rule for a signoff tool (run_command)
    capability: str | None = None
    targets: tuple[str, ...] = ()
    content: tuple[str, ...] = ()
    card: str = ""  # the card's "why" words; "" when the table says all
    own: bool = False  # a signoff tool: the daemon labels it

    @property
    def fingerprint_args(self) -> dict[str, Any]:
        """The arguments a grant is bound to (every one but the content ones)."""
        return {k: v for k, v in self.args.items() if k not in self.content}

    def request(self) -> dict[str, Any]:
        """The keyword arguments of `Signoff.request` for this call."""
        if self.own:
            return {"tool": self.tool, "args": self.args}
        asked: dict[str, Any] = {
            "tool": self.tool, "args": self.args, "risk": self.risk,
            "capability": self.capability, "targets": list(self.targets),
            "content": list(self.content)}
        if self.card:
            asked["why"] = self.card
        return asked


def label_for(tool_name: str) -> Label:
    """The label of a Claude Code tool; ``mcp__<server>__<tool>`` and unknown tools are
    DESTRUCTIVE with every argument in the fingerprint."""
    if tool_name in CLAUDE_TOOLS:
        return CLAUDE_TOOLS[tool_name]
    if tool_name.startswith("mcp__"):
        server = tool_name.split("__")[1] if tool_name.count("__") >= 2 else "unknown"
        return Label("DESTRUCTIVE", f"mcp.{server}")
    return Label("DESTRUCTIVE", f"claude.{tool_name}")


def ask_for(tool_name: str, tool_input: dict[str, Any], project_dir: Path | str) -> ClaudeAsk:
    """How one Claude Code tool call is asked (see the module docstring)."""
    project = Path(project_dir)
    if tool_name == "Bash":
        return _bash(tool_input, project)
    label = label_for(tool_name)
    targets = [str(tool_input[k]) for k in label.targets if tool_input.get(k) not in (None, "")]
    risk, words = label.risk, [label.note] if label.note else []
    verb = "writes" if label.write else "reads"
    for found in _placed(label, tool_input, project):
        if found.place is Place.INSIDE:
            continue
        risk = _raised(risk, "DESTRUCTIVE" if label.write else "SEND")
        words.append(found.words(verb))
        if found.moved and found.real not in targets:
            targets.append(found.real)
    name = f"claude.{tool_name}"
    if tool_name.startswith("mcp__") and tool_name.count("__") >= 2:
        server, tool = tool_name.removeprefix("mcp__").split("__", 1)
        name = f"{server}.{tool}"
    return ClaudeAsk(tool=name, args=dict(tool_input), risk=risk, capability=label.capability,
                     targets=tuple(targets), content=label.content, card="; ".join(words))


def _bash(tool_input: dict[str, Any], project: Path) -> ClaudeAsk:
    """Bash: the daemon's run_command (exact command + cwd), unless a flag is set."""
    command = str(tool_input.get("command", ""))
    flags = {k: tool_input[k] for k in BASH_FLAGS if tool_input.get(k)}
    if not flags:
        return ClaudeAsk(tool="run_command", args={"command": command, "cwd": str(project)},
                         risk=None, own=True)
    args = {"command": command, "cwd": str(project), **{k: bool(v) for k, v in flags.items()}}
    return ClaudeAsk(tool="claude.Bash", args=args, risk="DESTRUCTIVE",
                     capability="exec.shell", targets=(command, str(project)),
                     card="; ".join(_FLAG_WORDS[k] for k in flags))


def _placed(label: Label, tool_input: dict[str, Any], project: Path) -> list[Placed]:
    """Each file the call touches, placed (a read without a path reads the project; a
    write that names no file cannot be placed, so it counts as outside)."""
    found: list[Placed] = []
    for key in label.paths:
        value = tool_input.get(key)
        if not isinstance(value, str) or not value:
            if label.write:
                found.append(Placed(f"<no {key}>", "", Place.OUTSIDE, False))
            continue
        found.append(placed(project, _glob_root(value) if key == "pattern" else value))
    return found


def _glob_root(pattern: str) -> str:
    """The directory a glob pattern cannot leave: its part before the first wildcard."""
    parts = Path(pattern).parts
    kept = [p for p in parts[: next((i for i, p in enumerate(parts) if glob.has_magic(p)),
                                    len(parts))]]
    return str(Path(*kept)) if kept else "."


_RANK = {"READ": 0, "DRAFT": 1, "SEND": 2, "DESTRUCTIVE": 3}


def _raised(risk: str, floor: str) -> str:
    return risk if _RANK.get(risk, 3) >= _RANK[floor] else floor


def tool_table() -> str:
    """The docs' table of Claude Code's tools, from :data:`CLAUDE_TOOLS` itself."""
    rows = ["| Claude Code tool | sent to signoff as | risk | capability | targets | "
            "left out of the fingerprint |", "| --- | --- | --- | --- | --- | --- |",
            "| `Bash` | `run_command` (`claude.Bash` with `dangerouslyDisableSandbox` or "
            "`run_in_background`) | DESTRUCTIVE (READ if in `policy.read_only_commands`; "
            "always DESTRUCTIVE with a flag) | `exec.shell` | `command`, cwd | — |"]
    for name, label in CLAUDE_TOOLS.items():
        risk = label.risk
        if label.write:
            risk = "DRAFT inside the project, else DESTRUCTIVE"
        elif label.paths:
            risk = "READ inside the project, else SEND"
        rows.append(f"| `{name}` | `claude.{name}` | {risk} | `{label.capability}` | "
                    f"{_codes(label.targets)} | {_codes(label.content)} |")
    rows.append("| `mcp__<server>__<tool>` | `<server>.<tool>` | the server's "
                "`[[mcp.servers]]` labels, else DESTRUCTIVE | `mcp.<server>` | — | — |")
    rows.append("| anything else | `claude.<Tool>` | DESTRUCTIVE | `claude.<Tool>` | — | — |")
    return "\n".join(rows)


def _codes(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "—"


def call_digest(session: str, tool_name: str, tool_input: dict[str, Any]) -> str:
    """One exact Claude Code call in one session: a call that was left pending (Claude
    stopped waiting, or a headless run deferred) is found again by it when Claude retries
    or resumes, so the person's answer lands on that request instead of a new card."""
    text = json.dumps([session, tool_name, tool_input], sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
