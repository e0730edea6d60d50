"""The tool registry and the nine built-in tools, against real files, SMTP and HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from signoff.errors import BadArguments, PathEscape, PlatformUnavailable, ToolError, UnknownTool
from signoff.runtime.models import Action, RiskClass
from signoff.runtime.policy.net import NetAllow, NetRule
from signoff.runtime.tools import (
    Param,
    SmtpSettings,
    ToolContext,
    ToolRegistry,
    builtin_registry,
    canonical_json,
    confine,
    sha256_hex,
)
from signoff.wiring import channel_forms
from tests.fakes.http_echo import HttpEcho
from tests.fakes.smtp import FakeSmtpServer, free_port

PY = shlex.quote(sys.executable)


# --- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The work dir, with a sibling "outside" dir holding a secret."""
    (tmp_path / "work").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("top secret")
    return tmp_path / "work"


@pytest.fixture
def registry() -> ToolRegistry:
    """The built-ins, with one read-only command and no plugins."""
    return builtin_registry(read_only_commands=["ls -la", "git status"], entry_points_group=None)


def make_ctx(work: Path, **kw: Any) -> ToolContext:
    # The channel forms of the installed surfaces, as the wiring hands them over.
    kw.setdefault("channels", channel_forms())
    # The HTTP tests talk to a local server: listed in net_allow, as a user would list one.
    kw.setdefault("net", NetRule(allow=NetAllow.parse(["127.0.0.1"])))
    return ToolContext(work_dir=work, **kw)


def prep(registry: ToolRegistry, tool: str, **args: Any) -> Action:
    return registry.prepare(Action(tool=tool, args=args))


async def run(registry: ToolRegistry, ctx: ToolContext, tool: str, **args: Any) -> dict[str, Any]:
    return await registry.execute(prep(registry, tool, **args), ctx)


def snapshot(root: Path) -> dict[str, Any]:
    """Everything under ``root``: paths, symlink targets and file bytes."""
    state: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                state[key] = ("link", os.readlink(path))
            elif path.is_file():
                state[key] = ("file", path.read_bytes())
            else:
                state[key] = ("dir",)
    return state


# --- registry ---------------------------------------------------------------------------


def test_builtin_registry_has_the_nine_tools(registry: ToolRegistry) -> None:
    """builtin_registry registers exactly the nine contract tools."""
    assert registry.names() == sorted(
        [
            "read_file",
            "list_dir",
            "http_get",
            "write_file",
            "send_webhook",
            "send_email",
            "post_message",
            "delete_file",
            "run_command",
        ]
    )


@pytest.mark.parametrize(
    ("tool", "args", "risk", "capability"),
    [
        ("read_file", {"path": "a.txt"}, RiskClass.READ, "fs.read"),
        ("list_dir", {"path": "."}, RiskClass.READ, "fs.read"),
        ("http_get", {"url": "https://example.com/"}, RiskClass.READ, "net.fetch"),
        ("write_file", {"path": "a.txt", "content": "x"}, RiskClass.DRAFT, "fs.write"),
        ("send_webhook", {"url": "https://h.example/x", "payload": {}}, RiskClass.SEND, "net.post"),
        ("send_email", {"to": "a@b.c", "subject": "s", "body": "b"}, RiskClass.SEND, "email.send"),
        ("post_message", {"channel": "slack:C1", "text": "t"}, RiskClass.SEND, "chat.post"),
        ("delete_file", {"path": "a.txt"}, RiskClass.DESTRUCTIVE, "fs.delete"),
        ("run_command", {"command": "rm -rf x"}, RiskClass.DESTRUCTIVE, "exec.shell"),
    ],
)
def test_prepare_labels_each_builtin_as_the_contract_says(
    registry: ToolRegistry, tool: str, args: dict[str, Any], risk: RiskClass, capability: str
) -> None:
    """prepare sets the contract's risk class and capability, plus targets and fingerprint."""
    action = prep(registry, tool, **args)
    assert (action.risk, action.capability) == (risk, capability)
    assert action.targets and len(action.fingerprint or "") == 64


def test_unknown_tool_is_refused_and_known_tools_listed(registry: ToolRegistry) -> None:
    """An unknown tool raises UnknownTool naming it and the known tools."""
    with pytest.raises(UnknownTool, match=r"'launch_rockets'.*read_file"):
        prep(registry, "launch_rockets")


def test_prepare_drops_args_the_tool_does_not_define(registry: ToolRegistry) -> None:
    """Planner metadata such as query and name is dropped before the tool sees it."""
    action = prep(registry, "read_file", path="README.md", query="read it", name="read_file")
    assert action.args == {"path": "README.md"}


def test_missing_required_arg_is_bad_arguments(registry: ToolRegistry) -> None:
    """A missing required argument raises BadArguments naming the tool and the argument."""
    with pytest.raises(BadArguments, match=r"send_email.*'subject'"):
        prep(registry, "send_email", to="a@b.c", body="hi")


def test_wrong_type_is_bad_arguments(registry: ToolRegistry) -> None:
    """An argument of the wrong type raises BadArguments naming the tool and the argument."""
    with pytest.raises(BadArguments, match=r"write_file.*'content'.*string"):
        prep(registry, "write_file", path="a.txt", content=42)


def test_null_optional_arg_counts_as_absent(registry: ToolRegistry) -> None:
    """An optional argument sent as null is dropped, not a type error."""
    action = prep(registry, "send_email", to="a@b.c", subject="s", body="b", cc=None)
    assert "cc" not in action.args


def test_planner_may_raise_risk(registry: ToolRegistry) -> None:
    """A higher risk set by the planner is kept."""
    action = registry.prepare(
        Action(tool="read_file", args={"path": "a"}, risk=RiskClass.DESTRUCTIVE)
    )
    assert action.risk is RiskClass.DESTRUCTIVE


def test_planner_cannot_lower_risk(registry: ToolRegistry) -> None:
    """A lower risk set by the planner is replaced by the registry's."""
    action = registry.prepare(Action(tool="delete_file", args={"path": "a"}, risk=RiskClass.READ))
    assert action.risk is RiskClass.DESTRUCTIVE


def test_fingerprint_is_sha256_of_canonical_tool_capability_fields(
    registry: ToolRegistry,
) -> None:
    """The fingerprint is sha256 of canonical JSON of tool, capability and fields."""
    action = prep(registry, "post_message", channel="slack:C1", text="hello")
    expected = hashlib.sha256(
        b'{"capability":"chat.post","fields":{"channel":"slack:C1"},"tool":"post_message"}'
    ).hexdigest()
    assert action.fingerprint == expected


def test_canonical_json_is_sorted_compact_and_utf8() -> None:
    """canonical_json sorts keys, drops whitespace and keeps non-ASCII text."""
    assert canonical_json({"b": 1, "a": ["é", None]}) == '{"a":["é",null],"b":1}'
    assert sha256_hex("é") == hashlib.sha256("é".encode()).hexdigest()


def test_schemas_are_openai_function_tools(registry: ToolRegistry) -> None:
    """schemas() gives one OpenAI function tool per tool with a JSON-schema of its args."""
    by_name = {s["function"]["name"]: s for s in registry.schemas()}
    email = by_name["send_email"]
    assert email["type"] == "function"
    params = email["function"]["parameters"]
    assert params["required"] == ["to", "subject", "body"]
    assert params["properties"]["to"]["type"] == ["array", "string"]
    assert (
        by_name["send_webhook"]["function"]["parameters"]["properties"]["payload"].get("type")
        is None
    )
    json.dumps(registry.schemas())  # must be JSON as is


class _Exploding:
    """A plugin-style tool that fails with a raw exception and records its args."""

    name = "explode"
    capability = "test.explode"
    description = "Raise."
    params: tuple[Param, ...] = (Param("x", int),)
    seen: ClassVar[list[dict[str, Any]]] = []

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.READ

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"x": args["x"]}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return (str(args["x"]),)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        self.seen.append(args)
        raise RuntimeError("kaboom")


@pytest.mark.asyncio
async def test_execute_turns_raw_exceptions_into_tool_error(work: Path) -> None:
    """execute re-filters args and wraps a tool's raw exception in ToolError."""
    registry = ToolRegistry([_Exploding()])
    action = Action(tool="explode", args={"x": 1, "extra": "dropped"})
    with pytest.raises(ToolError, match="explode failed: kaboom") as info:
        await registry.execute(action, make_ctx(work))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert _Exploding.seen[-1] == {"x": 1}


def test_bool_is_not_an_int(work: Path) -> None:
    """true is refused where an integer is expected."""
    with pytest.raises(BadArguments, match="'x'"):
        ToolRegistry([_Exploding()]).prepare(Action(tool="explode", args={"x": True}))


class _BadFingerprint(_Exploding):
    """A plugin-style tool whose fingerprint fields are not JSON."""

    name = "bad_fingerprint"

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"x": object()}


def test_prepare_wraps_a_plugin_hook_failure_in_tool_error() -> None:
    """A tool hook that fails during prepare gives a ToolError, never a raw exception."""
    registry = ToolRegistry([_BadFingerprint()])
    with pytest.raises(ToolError, match="bad_fingerprint: cannot label"):
        registry.prepare(Action(tool="bad_fingerprint", args={"x": 1}))


class _LeakyFingerprint(_Exploding):
    """A plugin-style tool that tries to put message text into its fingerprint."""

    name = "leaky"
    params: tuple[Param, ...] = (Param("x", int), Param("text", str))

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"x": args["x"], "text": args["text"]}


def test_content_keys_never_reach_a_fingerprint() -> None:
    """Message content a plugin puts in its fingerprint fields is dropped."""
    registry = ToolRegistry([_LeakyFingerprint()])
    one = registry.prepare(Action(tool="leaky", args={"x": 1, "text": "a"}))
    two = registry.prepare(Action(tool="leaky", args={"x": 1, "text": "b"}))
    assert one.fingerprint == two.fingerprint


def test_smtp_password_stays_out_of_repr() -> None:
    """SmtpSettings never shows its password in a repr."""
    assert "hunter2" not in repr(SmtpSettings(username="u", password="hunter2"))


PLUGIN = textwrap.dedent(
    """
    from signoff.runtime.models import RiskClass

    class EchoTool:
        name = "echo"
        capability = "test.echo"
        description = "Echo."
        params = ()
        def risk_for(self, args): return RiskClass.READ
        def fingerprint_fields(self, args): return {}
        def targets(self, args): return ()
        async def run(self, args, ctx): return {"echo": True}

    def make_other():
        tool = EchoTool()
        tool.name = "echo_factory"
        return tool

    INSTANCE = EchoTool()
    INSTANCE.name = "echo_instance"

    class Shadow(EchoTool):
        name = "read_file"

    def broken():
        raise RuntimeError("plugin bug")
    """
)


def test_entry_points_load_and_broken_plugins_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entry points may give a class, factory or instance; broken ones are skipped."""
    (tmp_path / "signoff_test_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "signoff_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: signoff-test-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[signoff.tools.test]\n"
        "echo = signoff_test_plugin:EchoTool\n"
        "factory = signoff_test_plugin:make_other\n"
        "instance = signoff_test_plugin:INSTANCE\n"
        "shadow = signoff_test_plugin:Shadow\n"
        "broken = signoff_test_plugin:broken\n"
        "missing = signoff_test_plugin:nothing_here\n"
        "nomodule = signoff_no_such_module:Tool\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = builtin_registry(entry_points_group="signoff.tools.test")
    assert {"echo", "echo_factory", "echo_instance"} <= set(registry.names())
    assert len(registry.names()) == 12
    assert registry.get("read_file").capability == "fs.read"  # a plugin cannot shadow it


# --- file tools -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_write_read_list_delete_round_trip(registry: ToolRegistry, work: Path) -> None:
    """write_file creates parents, read_file and list_dir see it, delete_file removes it."""
    ctx = make_ctx(work)
    out = await run(registry, ctx, "write_file", path="notes/a.txt", content="héllo")
    assert out == {"path": "notes/a.txt", "bytes": 6, "created": True}
    read = await run(registry, ctx, "read_file", path="notes/a.txt")
    assert (read["content"], read["truncated"]) == ("héllo", False)
    listing = await run(registry, ctx, "list_dir", path="notes")
    assert listing["entries"] == [{"name": "a.txt", "type": "file", "size": 6}]
    assert (await run(registry, ctx, "delete_file", path="notes/a.txt"))["deleted"] is True
    assert not (work / "notes" / "a.txt").exists()


@pytest.mark.asyncio
async def test_a_large_write_lands_whole_and_confined(registry: ToolRegistry, work: Path) -> None:
    """A write over the inline size (written by a thread) is as whole and as confined as a
    small one."""
    ctx = make_ctx(work)
    big = "é" * 100_000
    out = await run(registry, ctx, "write_file", path="big/b.txt", content=big)
    assert out == {"path": "big/b.txt", "bytes": 200_000, "created": True}
    assert (work / "big" / "b.txt").read_text(encoding="utf-8") == big
    with pytest.raises(PathEscape):
        await run(registry, ctx, "write_file", path="../b.txt", content=big)
    assert not (work.parent / "b.txt").exists()


@pytest.mark.asyncio
async def test_read_file_truncates_and_says_so(registry: ToolRegistry, work: Path) -> None:
    """read_file keeps output_limit bytes and reports truncation and the full size."""
    (work / "big.txt").write_text("y" * 100)
    out = await run(registry, make_ctx(work, output_limit=10), "read_file", path="big.txt")
    assert (out["content"], out["truncated"], out["size"]) == ("y" * 10, True, 100)


@pytest.mark.asyncio
async def test_read_missing_file_is_tool_error(registry: ToolRegistry, work: Path) -> None:
    """Reading a file that does not exist fails with a ToolError naming it."""
    with pytest.raises(ToolError, match=r"no such file.*'nope\.txt'"):
        await run(registry, make_ctx(work), "read_file", path="nope.txt")


@pytest.mark.asyncio
async def test_delete_symlink_removes_the_link_only(registry: ToolRegistry, work: Path) -> None:
    """delete_file on a symlink inside the work dir removes the link, not its target."""
    (work / "target.txt").write_text("keep me")
    (work / "link.txt").symlink_to(work / "target.txt")
    await run(registry, make_ctx(work), "delete_file", path="link.txt")
    assert not (work / "link.txt").is_symlink()
    assert (work / "target.txt").read_text() == "keep me"


ESCAPES = [
    ("read_file", {}),
    ("list_dir", {}),
    ("write_file", {"content": "pwned"}),
    ("delete_file", {}),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("tool", "extra"), ESCAPES)
@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "symlinked_dir"])
async def test_paths_outside_the_work_dir_are_refused_and_nothing_changes(
    registry: ToolRegistry, work: Path, tool: str, extra: dict[str, Any], how: str
) -> None:
    """`..`, absolute paths outside and symlinks out are PathEscape; the disk is untouched."""
    outside = work.parent / "outside"
    (work / "out_link").symlink_to(outside / "secret.txt")
    (work / "out_dir").symlink_to(outside)
    path = {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlink": "out_link",
        "symlinked_dir": "out_dir/new.txt" if tool == "write_file" else "out_dir/secret.txt",
    }[how]
    before = snapshot(work.parent)
    with pytest.raises(PathEscape, match="leaves the work dir"):
        await run(registry, make_ctx(work), tool, path=path, **extra)
    assert snapshot(work.parent) == before


def test_confine_accepts_paths_inside_and_refuses_climbing_out(work: Path) -> None:
    """confine resolves relative and inside-absolute paths and refuses any `..` escape."""
    root = work.resolve()
    assert confine(work, "a/../b.txt") == root / "b.txt"
    assert confine(work, str(work / "c" / "d.txt")) == root / "c" / "d.txt"
    assert confine(work, "") == root
    with pytest.raises(PathEscape, match=r"path '\.\./x' leaves the work dir"):
        confine(work, "../x")
    with pytest.raises(PathEscape):
        confine(work, f"sub/../../{work.name}/x")  # leaves, then comes back: still refused


def test_path_spellings_of_one_file_share_a_fingerprint(work: Path) -> None:
    """Spellings a/../b.txt, ./b.txt, b.txt and its absolute path share one fingerprint."""
    registry = builtin_registry(work_dir=work, entry_points_group=None)
    prints = {
        prep(registry, "delete_file", path=p).fingerprint
        for p in ["a/../b.txt", "./b.txt", "b.txt", str(work / "b.txt")]
    }
    assert len(prints) == 1
    assert prep(registry, "delete_file", path="c.txt").fingerprint not in prints


def test_write_fingerprint_ignores_content(registry: ToolRegistry) -> None:
    """write_file's fingerprint covers the path, never the content."""
    one = prep(registry, "write_file", path="a.txt", content="one")
    two = prep(registry, "write_file", path="a.txt", content="two")
    assert one.fingerprint == two.fingerprint
    assert one.targets == ("a.txt",)


# --- HTTP tools -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_http_get_returns_status_headers_and_text(registry: ToolRegistry, work: Path) -> None:
    """http_get returns the status, a safe subset of headers and the body text."""
    async with HttpEcho() as echo:
        out = await run(registry, make_ctx(work), "http_get", url=echo.url("/text"))
    assert (out["status"], out["text"], out["truncated"]) == (200, "hello from echo", False)
    assert out["headers"]["content-type"].startswith("text/plain")
    assert "set-cookie" not in out["headers"]


@pytest.mark.asyncio
async def test_http_get_follows_redirects_truncates_and_reports_404(
    registry: ToolRegistry, work: Path
) -> None:
    """http_get follows redirects, cuts long bodies and reports a 404 as a status."""
    ctx = make_ctx(work, output_limit=50)
    async with HttpEcho() as echo:
        redirected = await run(registry, ctx, "http_get", url=echo.url("/redirect"))
        big = await run(registry, ctx, "http_get", url=echo.url("/big?size=5000"))
        missing = await run(registry, ctx, "http_get", url=echo.url("/status/404"))
    assert redirected["url"].endswith("/text") and redirected["text"] == "hello from echo"
    assert (big["text"], big["truncated"]) == ("x" * 50, True)
    assert missing["status"] == 404


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "not a url"])
def test_http_get_accepts_only_http_urls(registry: ToolRegistry, url: str) -> None:
    """Non-http(s) URLs are BadArguments before anything is fetched."""
    with pytest.raises(BadArguments):
        prep(registry, "http_get", url=url)


@pytest.mark.asyncio
async def test_http_get_times_out(registry: ToolRegistry, work: Path) -> None:
    """A server slower than http_timeout gives a ToolError that says so."""
    async with HttpEcho() as echo:
        with pytest.raises(ToolError, match=r"timed out after 0\.2s"):
            await run(
                registry,
                make_ctx(work, http_timeout=0.2),
                "http_get",
                url=echo.url("/slow?seconds=2"),
            )


@pytest.mark.asyncio
async def test_http_get_unreachable_is_tool_error(registry: ToolRegistry, work: Path) -> None:
    """A refused connection is a ToolError, not a raw httpx exception."""
    url = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(ToolError, match="http_get"):
        await run(registry, make_ctx(work), "http_get", url=url)


@pytest.mark.asyncio
async def test_send_webhook_posts_json(registry: ToolRegistry, work: Path) -> None:
    """send_webhook POSTs the payload as JSON and returns the status."""
    async with HttpEcho() as echo:
        out = await run(
            registry,
            make_ctx(work),
            "send_webhook",
            url=echo.url("/hook"),
            payload={"event": "deploy", "n": 1},
        )
        request = echo.requests[-1]
    assert out["status"] == 200
    assert (request.method, request.path) == ("POST", "/hook")
    assert request.json() == {"event": "deploy", "n": 1}


@pytest.mark.asyncio
async def test_send_webhook_non_2xx_is_tool_error(registry: ToolRegistry, work: Path) -> None:
    """A non-2xx answer fails the action with the status in the message."""
    async with HttpEcho() as echo:
        with pytest.raises(ToolError, match="answered 500"):
            await run(
                registry, make_ctx(work), "send_webhook", url=echo.url("/status/500"), payload={}
            )


@pytest.mark.asyncio
async def test_send_webhook_reads_a_bounded_answer(registry: ToolRegistry, work: Path) -> None:
    """A webhook whose answer never ends does not keep the step (and the daemon's memory)
    forever: the answer is read up to output_limit, as http_get's is, and the step ends."""
    async with HttpEcho() as echo:
        out = await asyncio.wait_for(run(registry, make_ctx(work, output_limit=1000),
                                         "send_webhook", url=echo.url("/endless"),
                                         payload={}), timeout=30)
    assert (out["status"], out["text"], out["truncated"]) == (200, "y" * 1000, True)


def test_webhook_fingerprint_is_the_url_only(registry: ToolRegistry) -> None:
    """Another payload keeps the fingerprint; another URL changes it."""
    one = prep(registry, "send_webhook", url="https://h.example/a", payload={"x": 1})
    two = prep(registry, "send_webhook", url="https://h.example/a", payload={"x": 2})
    other = prep(registry, "send_webhook", url="https://h.example/b", payload={"x": 1})
    assert one.fingerprint == two.fingerprint != other.fingerprint


# --- messaging tools --------------------------------------------------------------------


def smtp_ctx(work: Path, server: FakeSmtpServer) -> ToolContext:
    return make_ctx(
        work,
        smtp=SmtpSettings(host=server.host, port=server.port, sender="bot@signoff.test", timeout=5),
    )


@pytest.mark.asyncio
async def test_send_email_delivers_to_every_recipient(registry: ToolRegistry, work: Path) -> None:
    """send_email delivers over SMTP to to + cc with the subject and body."""
    with FakeSmtpServer() as server:
        out = await run(
            registry,
            smtp_ctx(work, server),
            "send_email",
            to=["John <john@example.com>", "ann@example.com"],
            cc="boss@example.com",
            subject="Weekly report",
            body="All green.",
        )
        received = server.messages
    assert len(received) == 1
    msg = received[0]
    assert sorted(msg.recipients) == ["ann@example.com", "boss@example.com", "john@example.com"]
    assert (msg.subject, msg.body.strip(), msg.sender) == (
        "Weekly report",
        "All green.",
        "bot@signoff.test",
    )
    assert msg.message["Cc"] == "boss@example.com"
    assert out["sent_to"] == ["ann@example.com", "boss@example.com", "john@example.com"]


@pytest.mark.asyncio
async def test_send_email_reports_refusals(registry: ToolRegistry, work: Path) -> None:
    """A partly refused send reports the refusals; a fully refused one fails."""
    with FakeSmtpServer(refuse={"ghost@example.com"}) as server:
        ctx = smtp_ctx(work, server)
        out = await run(
            registry,
            ctx,
            "send_email",
            to=["ghost@example.com", "a@example.com"],
            subject="s",
            body="b",
        )
        with pytest.raises(ToolError, match="refused every recipient"):
            await run(registry, ctx, "send_email", to="ghost@example.com", subject="s", body="b")
    assert out["sent_to"] == ["a@example.com"]
    assert "ghost@example.com" in out["refused"]


@pytest.mark.asyncio
async def test_send_email_unreachable_server_is_tool_error(
    registry: ToolRegistry, work: Path
) -> None:
    """No SMTP server listening gives a ToolError naming host and port."""
    ctx = make_ctx(work, smtp=SmtpSettings(host="127.0.0.1", port=free_port(), timeout=2))
    with pytest.raises(ToolError, match=r"send_email via 127\.0\.0\.1"):
        await run(registry, ctx, "send_email", to="a@b.c", subject="s", body="b")


@pytest.mark.parametrize(
    "to",
    [
        "no-at-sign",
        "two@@example.com",
        "@example.com",
        ["ok@example.com", 3],
        [],
        "a@b.c\nBcc: x@y.z",
    ],
)
def test_send_email_bad_recipients_fail_at_prepare(registry: ToolRegistry, to: Any) -> None:
    """Malformed or missing recipients are BadArguments before anyone is asked."""
    with pytest.raises(BadArguments):
        prep(registry, "send_email", to=to, subject="s", body="b")


@pytest.mark.asyncio
async def test_send_email_refuses_a_multi_line_subject(registry: ToolRegistry, work: Path) -> None:
    """A subject with a newline (header injection) is BadArguments; nothing is sent."""
    with FakeSmtpServer() as server:
        with pytest.raises(BadArguments, match="subject"):
            await run(
                registry,
                smtp_ctx(work, server),
                "send_email",
                to="a@b.c",
                subject="hi\nBcc: evil@example.com",
                body="b",
            )
        assert server.messages == []


def test_email_fingerprint_is_the_recipient_set(registry: ToolRegistry) -> None:
    """Subject and body never change the fingerprint; recipients do; order and case do not."""
    base = prep(registry, "send_email", to=["a@x.com", "b@x.com"], subject="s1", body="b1")
    content = prep(registry, "send_email", to=["a@x.com", "b@x.com"], subject="s2", body="b2")
    reordered = prep(registry, "send_email", to=["B@x.com", " a@x.com"], subject="s", body="b")
    via_cc = prep(registry, "send_email", to="a@x.com", cc="b@x.com", subject="s", body="b")
    another = prep(registry, "send_email", to=["a@x.com", "c@x.com"], subject="s1", body="b1")
    assert base.fingerprint == content.fingerprint == reordered.fingerprint
    assert base.fingerprint == via_cc.fingerprint
    assert base.fingerprint != another.fingerprint
    assert base.targets == ("a@x.com", "b@x.com")


class Poster:
    """A MessagePoster that records posts; ``surfaces`` are the reachable ones."""

    def __init__(self, surfaces: tuple[str, ...] = ("slack", "telegram"),
                 error: Exception | None = None) -> None:
        self.surfaces, self.error = surfaces, error
        self.posted: list[tuple[str, str]] = []

    def unreachable(self, channel: str) -> str | None:
        surface = channel.partition(":")[0]
        return None if surface in self.surfaces else f"no {surface} surface"

    async def post(self, channel: str, text: str) -> None:
        if self.error is not None:
            raise self.error
        self.posted.append((channel, text))


@pytest.mark.asyncio
async def test_post_message_goes_through_the_injected_poster(
    registry: ToolRegistry, work: Path
) -> None:
    """post_message hands channel and text to the injected poster."""
    poster = Poster()
    out = await run(
        registry,
        make_ctx(work, post_message=poster),
        "post_message",
        channel="slack:C1",
        text="deployed",
    )
    assert poster.posted == [("slack:C1", "deployed")] and out["posted"] is True


@pytest.mark.asyncio
@pytest.mark.parametrize(("channel", "problem"), [
    ("C123", "names no chat surface"), ("irc:C1", "names no chat surface"),
    ("slack:#general", "not a conversation id"), ("telegram:abc", "not a chat id"),
    ("telegram:-100123", "cannot reach channel telegram:-100123: no telegram surface"),
])
async def test_post_message_check_refuses_channels_nothing_reaches(
    registry: ToolRegistry, work: Path, channel: str, problem: str
) -> None:
    """A malformed channel, or one no running surface reaches, is refused by the check."""
    action = prep(registry, "post_message", channel=channel, text="x")
    with pytest.raises(ToolError, match=problem):
        await registry.check(action, make_ctx(work, post_message=Poster(("slack",))))


@pytest.mark.asyncio
async def test_checks_refuse_paths_and_cwds_outside_the_work_dir(
    registry: ToolRegistry, work: Path
) -> None:
    """`..`, an absolute path elsewhere, a symlink out and a cwd outside fail the check."""
    (work / "link").symlink_to(work.parent / "outside")
    ctx = make_ctx(work)
    for tool, args in [("delete_file", {"path": "../outside/secret.txt"}),
                       ("write_file", {"path": str(work.parent / "x"), "content": "x"}),
                       ("read_file", {"path": "link/secret.txt"}),
                       ("run_command", {"command": "ls", "cwd": ".."})]:
        with pytest.raises(PathEscape, match="leaves the work dir"):
            await registry.check(prep(registry, tool, **args), ctx)
    await registry.check(prep(registry, "delete_file", path="inside.txt"), ctx)
    assert (work.parent / "outside" / "secret.txt").exists()


@pytest.mark.asyncio
async def test_post_message_without_a_platform_fails(registry: ToolRegistry, work: Path) -> None:
    """With no chat platform configured post_message fails with a clear ToolError."""
    with pytest.raises(ToolError, match="no chat platform can reach channel slack:C1"):
        await run(registry, make_ctx(work), "post_message", channel="slack:C1", text="x")


@pytest.mark.asyncio
async def test_post_message_platform_errors_become_tool_errors(
    registry: ToolRegistry, work: Path
) -> None:
    """A platform failure surfaces as a ToolError naming the channel."""

    poster = Poster(error=PlatformUnavailable("slack is down"))
    with pytest.raises(ToolError, match="slack:C1 failed: slack is down"):
        await run(
            registry,
            make_ctx(work, post_message=poster),
            "post_message",
            channel="slack:C1",
            text="x",
        )


def test_post_message_fingerprint_is_the_channel(registry: ToolRegistry) -> None:
    """Another text keeps the fingerprint; another channel changes it."""
    one = prep(registry, "post_message", channel="slack:C1", text="a")
    two = prep(registry, "post_message", channel="slack:C1", text="b")
    other = prep(registry, "post_message", channel="slack:C2", text="a")
    assert one.fingerprint == two.fingerprint != other.fingerprint


# --- run_command ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_run_command_runs_without_a_shell(registry: ToolRegistry, work: Path) -> None:
    """Shell syntax is passed as plain arguments: no pipes, no variable expansion."""
    out = await run(registry, make_ctx(work), "run_command", command="echo $HOME | cat")
    assert out == {"exit_code": 0, "stdout": "$HOME | cat\n", "stderr": "", "truncated": False}


@pytest.mark.asyncio
async def test_run_command_cwd_is_confined(registry: ToolRegistry, work: Path) -> None:
    """cwd defaults to the work dir, may name a dir inside it, and may not leave it."""
    (work / "sub").mkdir()
    command = f"{PY} -c 'import os; print(os.getcwd())'"
    ctx = make_ctx(work)
    assert (await run(registry, ctx, "run_command", command=command))["stdout"].strip() == str(
        work.resolve()
    )
    inside = await run(registry, ctx, "run_command", command=command, cwd="sub")
    assert inside["stdout"].strip() == str((work / "sub").resolve())
    with pytest.raises(PathEscape):
        await run(registry, ctx, "run_command", command=command, cwd="..")


def test_run_command_read_only_list_is_exact(registry: ToolRegistry) -> None:
    """Only the exact listed string is READ; anything else is DESTRUCTIVE."""
    assert prep(registry, "run_command", command="ls -la").risk is RiskClass.READ
    assert prep(registry, "run_command", command="ls -la ").risk is RiskClass.DESTRUCTIVE
    assert prep(registry, "run_command", command="ls -l").risk is RiskClass.DESTRUCTIVE


async def test_git_status_is_never_read_only(tmp_path: Path) -> None:
    """Listed as read-only (the registry takes it; a config refuses it), ``git status``
    still asks: the agent may write a .git/config whose core.fsmonitor git would run."""
    registry = builtin_registry(read_only_commands=["git status"], work_dir=tmp_path,
                                entry_points_group=None)
    assert prep(registry, "run_command", command="git status").risk is RiskClass.DESTRUCTIVE


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho status\n")
    path.chmod(0o755)
    return path


@pytest.mark.asyncio
async def test_a_read_only_program_in_the_work_dir_asks(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listed command whose program is a file of the work dir, named by its absolute path
    or found along PATH (a project's .venv/bin), asks: write_file (DRAFT, unattended) keeps
    the file executable while it replaces its text, so as READ it would run the agent's."""
    script = _executable(work / "tools" / "status")
    ruff = _executable(work / ".venv" / "bin" / "ruff")
    monkeypatch.setenv("PATH", f"{ruff.parent}{os.pathsep}{os.environ['PATH']}")
    registry = builtin_registry(read_only_commands=[str(script), "ruff check", "ls -la"],
                                work_dir=work, entry_points_group=None)
    await run(registry, make_ctx(work), "write_file", path="tools/status",
              content="#!/bin/sh\necho planted\n")
    assert os.access(script, os.X_OK)  # what makes the rule needed
    assert prep(registry, "run_command", command=str(script)).risk is RiskClass.DESTRUCTIVE
    assert prep(registry, "run_command", command="ruff check").risk is RiskClass.DESTRUCTIVE
    assert prep(registry, "run_command", command="ruff check", cwd="tools").risk \
        is RiskClass.DESTRUCTIVE
    assert prep(registry, "run_command", command="ls -la").risk is RiskClass.READ


def test_run_command_fingerprint_is_command_and_cwd(registry: ToolRegistry) -> None:
    """The fingerprint covers the exact command and the normalized cwd."""
    default = prep(registry, "run_command", command="make test").fingerprint
    assert prep(registry, "run_command", command="make test", cwd="./").fingerprint == default
    assert prep(registry, "run_command", command="make test", cwd="sub").fingerprint != default
    assert prep(registry, "run_command", command="make  test").fingerprint != default


def test_run_command_unparsable_is_bad_arguments(registry: ToolRegistry) -> None:
    """Unbalanced quotes fail at prepare, before anyone is asked."""
    with pytest.raises(BadArguments, match="cannot parse"):
        prep(registry, "run_command", command="echo 'oops")


@pytest.mark.asyncio
async def test_run_command_timeout_kills_the_process(registry: ToolRegistry, work: Path) -> None:
    """A command past command_timeout is killed and reported as timed out."""
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"timed out after 0\.5s"):
        await run(
            registry,
            make_ctx(work, command_timeout=0.5),
            "run_command",
            command=f"{PY} -c 'import time; time.sleep(30)'",
        )
    assert time.monotonic() - started < 10


@pytest.mark.asyncio
async def test_run_command_failure_reports_exit_code_and_stderr(
    registry: ToolRegistry, work: Path
) -> None:
    """A non-zero exit is a ToolError with the exit code and the tail of stderr."""
    command = f"{PY} -c 'import sys; sys.stderr.write(\"disk on fire\"); sys.exit(3)'"
    with pytest.raises(ToolError, match="exited with code 3: disk on fire"):
        await run(registry, make_ctx(work), "run_command", command=command)


@pytest.mark.asyncio
async def test_run_command_not_found(registry: ToolRegistry, work: Path) -> None:
    """A program that does not exist is a ToolError naming it."""
    with pytest.raises(ToolError, match="command not found: 'no-such-program-xyz'"):
        await run(registry, make_ctx(work), "run_command", command="no-such-program-xyz --x")


@pytest.mark.asyncio
async def test_run_command_output_is_truncated(registry: ToolRegistry, work: Path) -> None:
    """stdout beyond output_limit is cut and the cut reported."""
    command = f"{PY} -c 'print(\"z\" * 100000)'"
    out = await run(registry, make_ctx(work, output_limit=100), "run_command", command=command)
    assert (out["stdout"], out["truncated"]) == ("z" * 100, True)
