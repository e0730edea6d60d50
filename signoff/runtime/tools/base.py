"""What a tool is: its parameters, its risk, its fingerprint, and how it runs.

A tool is any object with the attributes and methods of :class:`Tool`; built-ins and
plugins (entry-point group ``signoff.tools``) look the same to the registry. Tools never
see settings files: everything they need at run time arrives in a :class:`ToolContext`
built by the wiring, so tests can point a tool at a temporary dir or a fake SMTP server.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

from signoff.runtime.models import RiskClass
from signoff.runtime.policy.net import NetRule
from signoff.runtime.state import ProtectedFiles


@runtime_checkable
class MessagePoster(Protocol):
    """How `post_message` reaches chat: the wiring injects one that routes "slack:C123" /
    "telegram:-100123" to that surface's ``notify``, so the runtime never imports a chat SDK.
    """

    def unreachable(self, channel: str) -> str | None:
        """Why a well-formed ``channel`` cannot be posted to now; None when it can."""
        ...

    async def post(self, channel: str, text: str) -> None:
        """Post ``text``; PlatformError and kin when the surface fails."""
        ...

# Argument keys that carry message content, for tools that do not say which of theirs do
# (plugins written for 0.1). The contract keeps content out of every fingerprint, so
# approving one e-mail to John covers the next one to John.
CONTENT_KEYS = frozenset({"subject", "body", "payload", "text", "content"})


@dataclass(frozen=True)
class SmtpSettings:
    """Where `send_email` delivers (the `[email]` config table)."""

    host: str = "localhost"
    port: int = 25
    sender: str = "signoff@localhost"
    starttls: bool = False
    username: str | None = None
    # Kept out of the repr so the password never reaches a log line through one.
    password: str | None = field(default=None, repr=False)
    timeout: float = 30.0


@dataclass(frozen=True)
class ChannelForm:
    """How one chat surface writes its channels: ``<prefix>:<id>``, the id matching
    ``pattern``. The wiring makes one per installed surface from its plug-in, so the
    runtime names no surface itself."""

    prefix: str  # "slack"
    pattern: str  # the id, as a regular expression: "[CGD][A-Z0-9]+"
    expected: str  # "'slack:<channel id>' such as 'slack:C123'"
    kind: str  # what a well-formed id is: "a conversation id such as 'slack:C0123ABC'"


@dataclass(frozen=True)
class ToolContext:
    """Everything a tool may use while it runs."""

    work_dir: Path
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    post_message: MessagePoster | None = None
    channels: tuple[ChannelForm, ...] = ()  # the channel forms `post_message` accepts
    command_timeout: float = 60.0
    http_timeout: float = 30.0
    output_limit: int = 64_000  # bytes kept of any file, response body or command stream
    # Where network tools may connect (the policy's rule, checked again on every hop).
    net: NetRule = field(default_factory=NetRule)
    # Set by the registry for one call the policy marked "private network" (so a person or
    # their grant allowed it): its own URL may then be on a private network.
    private_ok: bool = False
    # The daemon's own files (state dir, database): refused by every file tool.
    protected: ProtectedFiles = field(default_factory=ProtectedFiles)
    # The only variables of the daemon's environment a run_command child sees.
    command_env: tuple[str, ...] = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")


@dataclass(frozen=True)
class Param:
    """One argument of a tool. ``type`` is what isinstance accepts; ``object`` means any JSON."""

    name: str
    type: type | tuple[type, ...]
    required: bool = True
    description: str = ""


@runtime_checkable
class Tool(Protocol):
    """A callable capability of the agent.

    ``risk_for``, ``fingerprint_fields`` and ``targets`` receive arguments already
    filtered to ``params`` and type-checked; they may raise
    :class:`~signoff.errors.BadArguments` when the values cannot name a valid target
    (a malformed address, an unsupported URL scheme), so bad actions fail before anyone
    is asked to approve them.
    """

    name: str
    capability: str
    description: str
    params: tuple[Param, ...]

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        """The risk class of this call."""
        ...

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        """What a grant for this call covers; never message content (see CONTENT_KEYS)."""
        ...

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        """What a person sees the call touch: paths, urls, recipients, channel, command."""
        ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Do the work; return JSON-able output or raise a ToolError subclass."""
        ...


@runtime_checkable
class CheckedTool(Protocol):
    """A tool that can tell, before anyone is asked to approve, that a call cannot succeed.

    Optional for plugins. The engine calls ``check`` on every action before the policy
    may ask a person, so a path outside the work dir or an unreachable channel fails the
    action at once instead of after somebody approved it.
    """

    async def check(self, args: dict[str, Any], ctx: ToolContext) -> None:
        """Raise a ToolError (BadArguments, PathEscape) naming what is wrong; touch nothing."""


@runtime_checkable
class SchemaTool(Tool, Protocol):
    """A tool whose arguments a JSON schema describes (MCP tools): the registry uses the
    schema for the model and lets the tool clean and validate its own arguments."""

    input_schema: dict[str, Any] | None  # None: not known yet (its server has not answered)

    def clean_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` reduced to the schema and validated; BadArguments otherwise."""
        ...


@runtime_checkable
class RedefinableTool(Tool, Protocol):
    """A tool whose meaning someone else can change under the same name (an MCP server's):
    its fingerprint binds ``definition``, what it said it was when a call was labelled, so
    the registry can tell at run time whether it still is what a person approved."""

    definition: str | None  # a digest of its description, schema and hints; None: unlisted


DEFINITION = "definition"  # the fingerprint field of a `RedefinableTool` holding it


# What an action carries of a tool's description (`told`), and what POST /v1/approvals
# takes as a request's ``description``: a server may list a longer one; a card shows its
# first few hundred characters.
DESCRIPTION_MAX = 1_000
_CONTROL = {c: None for c in (*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)}


def told(description: str | None) -> str | None:
    """A server's description of a tool as signoff keeps it (an MCP tool's ``said``, the
    ``description`` mcp-gate sends): control characters (but tab and line breaks) left
    out, the first `DESCRIPTION_MAX` characters; None when nothing is left. It is hostile
    text of any length; its start is what a card quotes."""
    text = (description or "").translate(_CONTROL)[:DESCRIPTION_MAX]
    return text if text.strip() else None


def said_of(tool: Tool) -> str | None:
    """What a `RedefinableTool` says it does, in its server's own words (its ``said``; an
    MCP tool's listed description), for a card to quote as that server's claim; None for
    any other tool, whose card speaks in the tool's own summary."""
    said = getattr(tool, "said", None) if is_a(tool, RedefinableTool) else None
    return said if isinstance(said, str) and said else None


@runtime_checkable
class DescribedTool(Tool, Protocol):
    """A tool that also says, in its own words, what a call does (every built-in does).

    Both members are optional for plugins: without them a card reads "Run <tool> on
    <targets>" and the content arguments are those named in ``CONTENT_KEYS``.
    """

    content: tuple[str, ...]  # arguments that are message content: on cards, never in grants

    def summary(self, args: dict[str, Any]) -> str:
        """The call in plain words, e.g. "Send email to john@example.com — subject 'Hi'"."""
        ...


def content_names(tool: Tool) -> tuple[str, ...]:
    """The arguments of ``tool`` that are message content (one rule for cards and grants)."""
    declared = getattr(tool, "content", None)
    if declared is not None:
        return tuple(declared)
    return tuple(p.name for p in tool.params if p.name in CONTENT_KEYS)


_KINDS: dict[tuple[int, type], tuple[object, bool]] = {}
_KINDS_MAX = 4096  # tools are few and long-lived; a bound all the same


def is_a(tool: object, kind: type) -> bool:
    """``isinstance(tool, kind)`` for the runtime-checkable tool protocols, remembered per
    tool object.

    On Python 3.11 such a check walks every member of the protocol (~50 µs); a task made
    about seven of them (prepare, check, run), a tenth of the daemon's work per task. A
    tool's methods do not come and go, so the first answer stays right.
    """
    key = (id(tool), kind)
    hit = _KINDS.get(key)
    if hit is not None and hit[0] is tool:  # the object itself: an id may be reused
        return hit[1]
    if len(_KINDS) >= _KINDS_MAX:
        _KINDS.clear()
    answer = isinstance(tool, kind)
    _KINDS[key] = (tool, answer)
    return answer


def summary_of(tool: Tool, args: dict[str, Any], targets: tuple[str, ...]) -> str:
    """What a card calls this call: the tool's own summary, else "Run <tool> on …"."""
    if is_a(tool, DescribedTool):
        return cast("DescribedTool", tool).summary(args)
    return f"Run {tool.name}" + (f" on {', '.join(targets)}" if targets else "")


def decode_prefix(data: bytes, *, truncated: bool) -> str:
    """Decode UTF-8 text that may have been cut mid-character by a byte limit.

    A cut through a multi-byte character is dropped rather than shown as garbage; invalid
    bytes elsewhere (a binary file) become U+FFFD so the output is always valid text.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=not truncated)


def tail(text: str, limit: int = 500) -> str:
    """The last ``limit`` characters of ``text``: errors usually say what went wrong last."""
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


# -- previews --------------------------------------------------------------------------
PREVIEW_LINES = 60  # lines of a preview on a card: a phone screen or two
PREVIEW_CHARS = 2500  # fits Slack's 3000-character section and Telegram's 4096 message


@dataclass(frozen=True)
class Preview:
    """What a call will do, shown on its card as a block of monospace text.

    ``label`` says what the block is ("Changes to notes.txt", "New file notes.txt",
    "Command"); ``text`` is the block itself, already bounded by `bounded` (its last line
    says what was left out when ``cut``). Surfaces escape it; they never shorten it away.
    """

    label: str
    text: str
    kind: str = "text"  # "diff" | "command" | "args" | "text": a hint for styling
    cut: bool = False


@runtime_checkable
class PreviewTool(Tool, Protocol):
    """A tool that can show what a call will do before it is approved (optional).

    ``preview`` runs when a card is built (in a worker thread: it may read the disk), so
    what it shows is the state of things then: write_file a diff against the file as it
    is, run_command the whole command and its cwd. It must touch nothing, and return None
    when it has nothing better to show than the card already does.
    """

    def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview | None:
        """The preview of this call, bounded with `bounded`."""
        ...


def bounded(text: str, *, lines: int = PREVIEW_LINES, chars: int = PREVIEW_CHARS
            ) -> tuple[str, bool]:
    """``text`` cut to whole lines within both limits, and whether anything was cut; a cut
    block ends with a line saying how much is not shown (surfaces show it as it is)."""
    rows = text.splitlines()
    room = chars - 60  # for the closing note
    kept: list[str] = []
    size = 0
    for whole in rows[:lines]:
        row = whole if len(whole) < room - 1 else whole[: room - 2] + "…"
        if size + len(row) + 1 > room:
            break
        kept.append(row)
        size += len(row) + 1
    if len(kept) == len(rows) and kept == rows:
        return "\n".join(kept), False
    left = len(rows) - len(kept)
    kept.append(f"… {left} more line{'s' if left != 1 else ''} not shown" if left
                else "… (long lines shortened)")
    return "\n".join(kept), True


def args_preview(args: dict[str, Any], content: tuple[str, ...] = ()) -> Preview | None:
    """The generic preview: every argument as indented JSON (MCP tools and others whose
    own words cannot say more); content arguments are left to the card's detail lines."""
    shown = {k: v for k, v in args.items() if k not in content}
    if not shown:
        return None
    text, cut = bounded(json.dumps(shown, indent=2, ensure_ascii=False, default=str))
    return Preview(label="Arguments", text=text, kind="args", cut=cut)
