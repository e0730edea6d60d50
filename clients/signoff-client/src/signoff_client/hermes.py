"""The Hermes Agent plugin: every Hermes tool call asks a signoff daemon first.

Installed with this distribution, Hermes finds it through the entry point
``hermes_agent.plugins: signoff = "signoff_client.hermes"`` and, once enabled
(``hermes plugins enable signoff``), calls `register`, which hooks ``pre_tool_call``.
For each call the hook sends one request to the daemon at ``SIGNOFF_URL`` (key
``SIGNOFF_API_KEY``) with ``policy_id`` = the Hermes session id, so a "Session" answer
covers that exact action for the rest of that Hermes session, and waits for the answer:

* approved (by a person, a grant, or the policy for READ work) → None: the call runs;
* denied, blocked, timed out, daemon unreachable, anything unexpected →
  ``{"action": "block", "message": "signoff: not approved: …"}``.

Hermes fails OPEN when a hook raises (its `invoke_hook` logs and ignores the error) and
ignores a block without a message, so this hook catches everything itself and always
blocks with a non-empty message: fail closed. ``SIGNOFF_WAIT`` (seconds) bounds the wait
for a person; by default the hook waits until the request expires on the daemon.

`TOOLS` maps Hermes' tools to risk, capability and fingerprint; the README's table is
checked against it. ``terminal`` is sent as signoff's own ``run_command`` (the exact
command and its cwd — the ``workdir`` argument, else this process's cwd), so the daemon's
``policy.read_only_commands`` makes listed commands READ. ``write_file`` and ``patch``
are DRAFT only for files inside Hermes' working directory (decided on the resolved path by
`signoff_client.places`: a symlink out of it, its ``.git``, CI or hook files count as
outside); elsewhere they are DESTRUCTIVE and the card says where the file really is.
``read_file`` and ``search_files`` are READ inside it and SEND elsewhere (``~/.ssh``, a
daemon's config with its key). ``web_extract`` and ``browser_navigate`` are SEND: the URL
is the model's, and it can carry what the agent read. A tool not in the table is
DESTRUCTIVE, with every argument in its fingerprint.
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from signoff_client.places import Place, Placed, placed
from signoff_client.sdk import Decision, SignoffSync

log = logging.getLogger(__name__)

BLOCK_PREFIX = "signoff: not approved: "


@dataclass(frozen=True)
class ToolRule:
    """How one Hermes tool is put to signoff."""

    risk: str
    capability: str
    targets: tuple[str, ...] = ()  # arguments whose values are the targets
    content: tuple[str, ...] = ()  # arguments left out of the fingerprint
    writes: bool = False  # writes its files: ``risk`` inside the working directory only
    reads: bool = False  # reads its files: ``risk`` inside the working directory only
    note: str = ""  # said on every card of this tool


def _files(*targets: str) -> ToolRule:
    return ToolRule("READ", "fs.read", targets, reads=True)


def _fetch(capability: str, target: str) -> ToolRule:
    # Like Claude Code's WebFetch: the model picks the URL, and a URL can carry anything
    # the agent has read (a key, a file) to whoever serves it.
    return ToolRule("SEND", capability, (target,),
                    note="fetches a URL the agent chose: the URL can carry data out")


def _read(capability: str, *targets: str) -> ToolRule:
    return ToolRule("READ", capability, targets)


# Hermes Agent 0.19.0's tools. READ runs at once (unless the daemon's autonomous_risks say
# otherwise); DRAFT is reversible local work (autonomous by default); SEND leaves the
# machine; DESTRUCTIVE may not be undone.
TOOLS: dict[str, ToolRule] = {
    "read_file": _files("path"),
    "search_files": _files("path", "pattern"),
    "read_terminal": _read("exec.read"),
    "session_search": _read("hermes.memory", "query"),
    "skills_list": _read("hermes.skills"),
    "skill_view": _read("hermes.skills", "name"),
    "web_search": _read("net.fetch", "query"),
    "web_extract": _fetch("net.fetch", "urls"),
    "x_search": _read("net.fetch", "query"),
    "vision_analyze": _read("media.read", "image_url"),
    "video_analyze": _read("media.read", "video_url"),
    "browser_navigate": _fetch("browser.read", "url"),
    "browser_snapshot": _read("browser.read"),
    "browser_scroll": _read("browser.read"),
    "browser_back": _read("browser.read"),
    "browser_get_images": _read("browser.read"),
    "browser_vision": _read("browser.read"),
    "browser_console": _read("browser.read"),
    "clarify": _read("hermes.ask"),
    "todo": ToolRule("DRAFT", "hermes.todo"),
    "memory": ToolRule("DRAFT", "hermes.memory", ("action", "target"), ("content", "old_text")),
    "write_file": ToolRule("DRAFT", "fs.write", ("path",), ("content",), writes=True),
    "patch": ToolRule("DRAFT", "fs.write", ("path",), ("old_string", "new_string", "patch"),
                      writes=True),
    "skill_manage": ToolRule("DRAFT", "hermes.skills", ("name",),
                             ("content", "file_content", "old_string", "new_string")),
    "image_generate": ToolRule("DRAFT", "media.create", (), ("prompt",)),
    "text_to_speech": ToolRule("DRAFT", "media.create", (), ("text",)),
    "browser_click": ToolRule("SEND", "browser.act", ("ref",)),
    "browser_type": ToolRule("SEND", "browser.act", ("ref",), ("text",)),
    "browser_press": ToolRule("SEND", "browser.act", ("key",)),
    "send_message": ToolRule("SEND", "chat.post", ("target",), ("message",)),
    "delegate_task": ToolRule("SEND", "hermes.delegate", (), ("goal", "context")),
    "execute_code": ToolRule("DESTRUCTIVE", "exec.code"),
    "process": ToolRule("DESTRUCTIVE", "exec.process", ("action", "session_id")),
    "cronjob": ToolRule("DESTRUCTIVE", "hermes.schedule", ("action",)),
    "ha_call_service": ToolRule("DESTRUCTIVE", "home.act", ("domain", "service", "entity_id")),
}
TERMINAL = "terminal"  # sent as run_command: DESTRUCTIVE, READ if in read_only_commands
DEFAULT_RISK = "DESTRUCTIVE"
# The file headers of a V4A patch (``patch`` in its "patch" mode names files this way).
PATCH_HEADERS = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")

class _Cache:
    """The plugin's one client (Hermes may call hooks from several threads)."""

    client: SignoffSync | None = None
    lock = threading.Lock()

def _target_values(args: Mapping[str, Any], names: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for name in names:
        value = args.get(name)
        if isinstance(value, list | tuple):
            out.extend(str(v) for v in value)
        elif value not in (None, ""):
            out.append(str(value))
    return out


def request_for(tool_name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The signoff request (tool, args and labels) for one Hermes tool call."""
    if tool_name == TERMINAL:
        cwd = args.get("workdir") or os.getcwd()
        return {"tool": "run_command",
                "args": {"command": str(args.get("command", "")), "cwd": str(cwd)}}
    rule = TOOLS.get(tool_name)
    if rule is None:
        return {"tool": f"hermes.{tool_name}", "args": dict(args), "risk": DEFAULT_RISK,
                "capability": f"hermes.{tool_name}"}
    asked = {"tool": f"hermes.{tool_name}", "args": dict(args), "risk": rule.risk,
             "capability": rule.capability, "targets": _target_values(args, rule.targets),
             "content": list(rule.content)}
    if rule.note:
        asked["why"] = rule.note
    if rule.writes:
        _place(asked, _written(args), "writes", "DESTRUCTIVE")
    elif rule.reads:
        # A read without a path reads the working directory (search_files' default).
        _place(asked, _target_values(args, ("path",)) or ["."], "reads", "SEND")
    return asked


def _written(args: Mapping[str, Any]) -> list[str]:
    """The files a write_file or patch call writes: ``path`` and a V4A patch's headers."""
    paths = _target_values(args, ("path",))
    text = args.get("patch")
    for line in text.splitlines() if isinstance(text, str) else ():
        paths.extend(line[len(h):].strip() for h in PATCH_HEADERS if line.startswith(h))
    return [p for p in dict.fromkeys(paths) if p]


def _place(asked: dict[str, Any], files: list[str], verb: str, risk: str) -> None:
    """A file outside Hermes' working directory (through a symlink too), or its git, CI,
    hook or agent files, raises the call to ``risk`` (a write: DESTRUCTIVE; a read: SEND,
    since what it reads can leave with the next call), and its card says where the file
    really is. The same rule as Claude Code's tools (`signoff_client.places`)."""
    found = [placed(os.getcwd(), p) for p in files] or [
        Placed("<no path>", "", Place.OUTSIDE, False)]
    away = [f for f in found if f.place is not Place.INSIDE]
    if not away:
        return
    asked["risk"] = risk
    asked["targets"] = list(dict.fromkeys(
        [*asked["targets"], *files, *(f.real for f in away if f.moved)]))
    asked["why"] = "; ".join(f.words(verb) for f in away)


def client() -> SignoffSync:
    """The plugin's client, made once from SIGNOFF_URL / SIGNOFF_API_KEY."""
    with _Cache.lock:
        if _Cache.client is None:
            who = f"hermes:{getpass.getuser()}@{socket.gethostname()}"
            _Cache.client = SignoffSync(requester=who, timeout=5.0, retries=2, backoff=0.25)
        return _Cache.client


def reset_client() -> None:
    """Forget the client (after SIGNOFF_URL or SIGNOFF_API_KEY changed)."""
    with _Cache.lock:
        if _Cache.client is not None:
            _Cache.client.close()
        _Cache.client = None

def _wait_seconds() -> bool | float:
    text = os.environ.get("SIGNOFF_WAIT", "").strip()
    if not text:
        return True
    try:
        return max(float(text), 0.0)
    except ValueError:
        return True


def _block(why: str) -> dict[str, str]:
    return {"action": "block", "message": BLOCK_PREFIX + (why.strip() or "no reason given")}


def decide(tool_name: str, args: Mapping[str, Any], *, session_id: str = "",
           task_id: str = "") -> Decision:
    """Ask the daemon about one Hermes tool call and wait for the answer."""
    policy_id = session_id or (f"hermes-task:{task_id}" if task_id else "hermes")
    ask = request_for(tool_name, args)
    # Hermes runs this hook once per dispatch, so each call gets a key of its own (the
    # SDK draws one) that its retries share. Not the tool call id: model servers repeat
    # ids ("call_0" every turn), and a key reused for another call would at best be
    # refused, at worst (an older daemon) return the first call's approval.
    return client().request(**ask, policy_id=policy_id, wait=_wait_seconds())


def pre_tool_call(tool_name: str = "", args: Mapping[str, Any] | None = None,
                  task_id: str = "", session_id: str = "", **_: Any) -> dict[str, str] | None:
    """Hermes' ``pre_tool_call`` hook: None lets the call run; a block stops it."""
    try:
        decision = decide(tool_name, args if isinstance(args, Mapping) else {},
                          session_id=session_id, task_id=task_id)
    except Exception as exc:  # Hermes would ignore our exception and run the tool
        log.exception("signoff_hook_failed")
        return _block(f"the signoff plugin failed ({type(exc).__name__}: {exc})")
    if decision.approved:
        return None
    if decision.pending:
        return _block(f"no answer yet (request {decision.id}); ask again later")
    return _block(decision.describe())


def register(ctx: Any) -> None:
    """Hermes' plugin entry point: hook every tool call."""
    ctx.register_hook("pre_tool_call", pre_tool_call)
