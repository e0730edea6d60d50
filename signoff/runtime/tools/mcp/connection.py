"""One MCP server kept alive: start it, list its tools, watch it, restart it when it dies.

Everything MCP goes through the official `mcp` SDK (`ClientSession` over `stdio_client`
or `streamable_http_client`). :meth:`McpConnection.run` is a service: it connects,
serves calls until the connection is lost (the server's stdout closes, a ping goes
unanswered, a call sees the connection closed), then reconnects after a backoff that
doubles up to 30 s and starts again once a session has served for a ping interval.

A server that sends ``notifications/tools/list_changed`` is listed again (by the watch
loop, never inside the SDK's notification callback, which must not wait on the server):
its tools are then validated, labelled and fingerprinted by what it says now, so a grant
given to the old definition of a tool does not cover the new one (see `tool`). A tool
looked up (`listed`) between the notification and that answer waits for the answer: the
server already said the listing it would be judged by is out of date.

`lists` counts the changes of each of the server's lists, for those who pass them on
(`signoff mcp-gate` tells its clients, `changed_after`): ``tools`` moves on with each
listing that differs from the one before (after a notification, or a restart);
``prompts`` and ``resources``, which are not listed here, move on when the server says
they changed (``notifications/prompts/list_changed``,
``notifications/resources/list_changed``) and when it comes back from a restart, as
they may then differ.

While the server is down its tools fail at once with "MCP server 'git' is down: …";
during a (re)start a call waits for it, up to the connect timeout. The last listing is
kept while down, so the registry still knows the tools and can say why they fail.

Stopping: cancelling :meth:`run` leaves the SDK's context managers, which close the
server's stdin and then terminate its process tree. The SDK starts stdio servers in a
session of their own, so a signal to the daemon's process group never reaches them;
as a last resort the process is killed explicitly by its pid (found in /proc as our
child with the configured argv) if the SDK's shutdown did not end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from signoff._version import __version__
from signoff.errors import ToolError, ToolUnavailable, UnknownTool
from signoff.runtime.bounds import TOO_DEEP, too_deep_at
from signoff.runtime.state import PRIVATE_DIR, PRIVATE_FILE
from signoff.runtime.tools.mcp.procs import child_pid, is_alive, release, running
from signoff.runtime.tools.mcp.spec import McpServerSpec
from signoff.runtime.tools.mcp.tool import ListedTool, McpTool
from signoff.runtime.tools.names import allowed_mcp_tool, mcp_tool_name

log = logging.getLogger(__name__)

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
PING_TIMEOUT = 10.0
MAX_DEFINITION = 64 * 1024  # bytes of JSON a tool's description, schema and hints may take
STARTING = "starting"
LISTS = ("tools", "prompts", "resources")  # the server's lists whose changes are counted
T = TypeVar("T")
UP = "up"


class McpConnection:
    """The session with one configured MCP server, and the tools it lists."""

    def __init__(self, spec: McpServerSpec, *, log_dir: Path | None = None,
                 cwd: Path | None = None, ping_interval: float = 15.0) -> None:
        self.spec = spec
        self.log_path = log_dir / f"mcp-{spec.name}.log" if log_dir else None
        self.cwd = cwd  # where a stdio server starts; None: the daemon's working directory
        self.ping_interval = ping_interval
        self.state = STARTING  # "starting", "up" or "down: <why>"
        self.pid: int | None = None  # the stdio server's process while it runs
        self.starts = 0  # sessions that came up so far (restarts are starts - 1)
        self._session: ClientSession | None = None
        self._tools: dict[str, McpTool] | None = None  # the last listing, kept while down
        self.raw_tools: list[types.Tool] = []  # the same listing as the server sent it
        self._connecting = True
        self._up = asyncio.Event()
        self._tried = asyncio.Event()  # the first attempt ended, either way
        self._lost = asyncio.Event()  # a call saw the connection close under it
        self._changed = asyncio.Event()  # the server said its tools changed: list again
        self._current = asyncio.Event()  # clear from that notice until the listing answers
        self._current.set()
        self.lists = dict.fromkeys(LISTS, 0)  # changes of each list, as far as we know
        self._moved = asyncio.Event()  # set (and replaced) when one of `lists` moves on
        self._log_start = 0  # where this session's stderr begins in the log file

    # -- what the registry sees ------------------------------------------------------
    def tools(self) -> list[McpTool]:
        """The listed tools; before any listing, placeholders for the configured ones."""
        if self._tools is not None:
            return list(self._tools.values())
        return [self._placeholder(name) for name in self.spec.tools]

    def find(self, tool: str) -> McpTool | None:
        """The tool called ``tool`` on this server (a placeholder while never listed)."""
        if self._tools is not None:
            return self._tools.get(tool)
        return self._placeholder(tool)

    def _placeholder(self, tool: str) -> McpTool:
        return McpTool(self.spec, ListedTool(name=tool), self, placeholder=True)

    async def wait_tried(self, timeout: float) -> None:
        """Wait until the first start succeeded or failed (at most ``timeout`` seconds)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._tried.wait()

    # -- what a tool uses --------------------------------------------------------------
    async def _ready(self) -> ClientSession:
        if self._session is None and self._connecting:
            await self.wait_up(self.spec.connect_timeout)
        if self._session is None:
            raise ToolUnavailable(f"MCP server {self.spec.name!r} is {self.state}")
        return self._session

    async def wait_up(self, timeout: float) -> bool:
        """Wait until the server is up (at most ``timeout`` seconds); True if it is."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._up.wait()
        return self._session is not None

    async def listed(self, tool: str) -> McpTool:
        """The listed tool called ``tool``; ToolError while down or if it is not listed.
        Waits for a listing the server said is out of date to be replaced."""
        await self._ready()
        await self._relisted()
        found = self._tools.get(tool) if self._tools is not None else None
        if found is None:
            known = ", ".join(sorted(self._tools or ())) or "none"
            raise UnknownTool(f"MCP server {self.spec.name!r} has no tool {tool!r} "
                              f"(it lists: {known})")
        return found

    async def _relisted(self) -> None:
        """Return once no listing is outstanding; a ToolUnavailable (fail closed) if the
        server did not answer: its session ended under the wait (`_watch` gives it up when
        ``tools/list`` goes unanswered for the connect timeout), or that long passed."""
        if self._current.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.spec.connect_timeout):
                await self._current.wait()
        if not self._current.is_set() or self._session is None:
            raise ToolUnavailable(f"MCP server {self.spec.name!r} said its tools changed "
                                  f"and did not list them again ({self.state})")

    async def changed_after(self, seen: dict[str, int]) -> dict[str, int]:
        """Wait until one of `lists` is past ``seen``; return them all."""
        while self.lists == seen:
            moved = self._moved  # the event of these counts: a later one replaces it
            await moved.wait()
        return dict(self.lists)

    def _move(self, kind: str) -> None:
        """Note that the server's list ``kind`` changed (see `lists`)."""
        self.lists[kind] += 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """``tools/call``; the result as JSON-able data, a ToolError on any failure."""
        name = mcp_tool_name(self.spec.name, tool)
        return tool_output(name, await self.call_raw(tool, args))

    async def call_raw(self, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        """``tools/call``; the server's result as it sent it (``isError`` included), a
        ToolError when the call itself failed (server down, timeout, protocol error)."""
        session = await self._ready()
        name = mcp_tool_name(self.spec.name, tool)
        try:
            with anyio.fail_after(self.spec.call_timeout):
                result = await session.call_tool(tool, args)
        except TimeoutError:
            raise ToolError(f"{name}: no answer from MCP server {self.spec.name!r} within "
                            f"{self.spec.call_timeout:g}s") from None
        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            if isinstance(exc, MCPError) and exc.code != types.CONNECTION_CLOSED:
                raise ToolError(f"{name}: MCP server {self.spec.name!r} refused the call: "
                                f"{exc.message}") from exc
            self._lost.set()  # do not wait for the next ping to notice
            raise ToolUnavailable(f"{name}: MCP server {self.spec.name!r} closed the "
                                  "connection during the call (outcome unknown)") from exc
        return result

    def offers(self, part: str) -> bool:
        """Whether the server said it has ``part`` ("prompts" or "resources")."""
        caps = self._session.server_capabilities if self._session is not None else None
        return caps is not None and getattr(caps, part, None) is not None

    async def forward(self, what: str, call: Callable[[ClientSession], Awaitable[T]]) -> T:
        """One request that is not a tool call (a prompt, a resource), sent as it came;
        the server's own error (an `MCPError`) is raised unchanged, and a ToolError when
        the server is down or does not answer in time."""
        session = await self._ready()
        try:
            with anyio.fail_after(self.spec.call_timeout):
                return await call(session)
        except TimeoutError:
            raise ToolError(f"{what}: no answer from MCP server {self.spec.name!r} within "
                            f"{self.spec.call_timeout:g}s") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self._lost.set()
            raise ToolUnavailable(f"{what}: MCP server {self.spec.name!r} closed the "
                                  "connection") from exc

    # -- the service ------------------------------------------------------------------
    async def run(self) -> None:
        """Keep the server up until cancelled (then stop it)."""
        delay = BACKOFF_START
        try:
            await self._keep_up(delay)
        finally:
            self.state = "stopped"
            self._tried.set()

    async def _keep_up(self, delay: float) -> None:
        while True:
            self._connecting = True
            served, reason = False, "the connection closed"
            try:
                served, reason = await self._serve_once()
            except Exception as exc:  # the SDK, the OS or the server: report it, retry
                reason = describe(exc, self.spec)
            finally:
                self._session = None
                self._connecting = False
                self._up.clear()
                self._current.set()  # no answer will come on this session; a restart lists
            reason = self._with_log_tail(reason)
            self.state = f"down: {reason}"
            self._tried.set()
            log.warning("mcp_server_down", extra={"server": self.spec.name, "reason": reason,
                                                  "retry_in": delay})
            if served:
                delay = BACKOFF_START
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    async def _serve_once(self) -> tuple[bool, str]:
        """One session, from start to loss: (served a ping interval, why it ended)."""
        self._lost.clear()
        self._changed.clear()
        async with contextlib.AsyncExitStack() as stack:
            # Registered first, so it runs last: after the SDK's own shutdown.
            stack.push_async_callback(self._reap)
            read, write = await stack.enter_async_context(self._transport(stack))
            if self.spec.command:
                self.pid = await asyncio.to_thread(child_pid, list(self.spec.command))
            closed = asyncio.Event()
            pump_group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(pump_group.cancel_scope.cancel)
            forward, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            pump_group.start_soon(_pump, read, forward, closed)
            session = await stack.enter_async_context(ClientSession(
                inbound, write, message_handler=self._on_message,
                client_info=types.Implementation(name="signoff", version=__version__)))
            with anyio.fail_after(self.spec.connect_timeout):
                await session.initialize()
                self._take(await _list_tools(session))
            self._session = session
            self.state = UP
            self.starts += 1
            if self.starts > 1:  # a restarted server may offer other prompts and resources
                self._move("prompts")
                self._move("resources")
            self._up.set()
            self._tried.set()
            log.info("mcp_server_up", extra={"server": self.spec.name,
                                             "tools": len(self.raw_tools), "pid": self.pid})
            return await self._watch(session, closed)

    def _take(self, raw: list[types.Tool]) -> None:
        """Make ``raw`` (a whole ``tools/list``) the tools the registry sees, less those
        `unusable` says no to: they are no tools of ours (nor of mcp-gate's)."""
        judged = [(t, unusable(t)) for t in raw]
        skipped = [(t.name, why) for t, why in judged if why is not None]
        if skipped:
            log.warning("mcp_tools_skipped", extra={
                "server": self.spec.name, "count": len(skipped),
                "names": [ascii(name[:80]) for name, _ in skipped[:5]],
                "why": sorted({why for _, why in skipped})})
            raw = [t for t, why in judged if why is None]
        if raw != self.raw_tools:
            self._move("tools")
        self._tools = {t.name: McpTool(self.spec, t, self) for t in map(_listed, raw)}
        self.raw_tools = raw

    async def _on_message(self, message: Any) -> None:
        """The SDK's callback for what the server sends unasked: note a changed tool list
        (listed again by `_watch`; a request from here would wait on this very callback),
        or changed prompts or resources."""
        if isinstance(message, types.ToolListChangedNotification):
            self._current.clear()
            self._changed.set()
        elif isinstance(message, types.PromptListChangedNotification):
            self._move("prompts")
        elif isinstance(message, types.ResourceListChangedNotification):
            self._move("resources")

    async def _relist(self, session: ClientSession) -> str | None:
        """List the tools again after the server said they changed; why that failed, or
        None. Until it answers, a tool looked up waits (`listed`): the old listing is
        what the server just said is out of date."""
        self._changed.clear()
        try:
            with anyio.fail_after(self.spec.connect_timeout):
                raw = await _list_tools(session)
        except Exception:  # a timeout, or the connection failed under the request
            return f"no answer to tools/list within {self.spec.connect_timeout:g}s"
        self._take(raw)
        if not self._changed.is_set():  # else another notice came during the request
            self._current.set()
        log.info("mcp_tools_changed", extra={"server": self.spec.name, "tools": len(raw)})
        return None

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        if not self.spec.command:
            assert self.spec.url is not None
            return streamable_http_client(self.spec.url)
        errlog = stack.enter_context(self._open_log())
        if self.cwd is not None:
            self.cwd.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        params = StdioServerParameters(command=self.spec.command[0],
                                       args=list(self.spec.command[1:]),
                                       env=dict(self.spec.env) or None, cwd=self.cwd)
        return stdio_client(params, errlog=errlog)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def _open_log(self) -> Any:
        """The server's stderr: its log file in the state dir, 0600 (else nowhere): a
        server may log what it was sent."""
        path = self.log_path
        if path is not None:
            path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        with open(path or os.devnull, "a", encoding="utf-8", opener=_private) as fh:
            self._log_start = fh.tell()
            yield fh

    async def _watch(self, session: ClientSession, closed: asyncio.Event) -> tuple[bool, str]:
        served = False
        while True:
            with anyio.move_on_after(self.ping_interval):
                while not (closed.is_set() or self._lost.is_set() or self._changed.is_set()):
                    await _first(closed, self._lost, self._changed)
            if closed.is_set() or self._lost.is_set():
                exited = self.pid is not None and not is_alive(self.pid)
                return served, ("the server process exited" if exited
                                else "the server closed the connection")
            if self._changed.is_set():
                failed = await self._relist(session)
                if failed is not None:
                    return served, failed
                continue  # it answered: as good as a ping
            try:
                with anyio.fail_after(PING_TIMEOUT):
                    await session.send_ping()
            except Exception:  # a timeout, or the connection failed under the ping
                return served, f"no answer to a ping within {PING_TIMEOUT:g}s"
            served = True

    async def _reap(self) -> None:
        """Make sure the stdio server is gone (the SDK normally ended it already)."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        if running(pid, list(self.spec.command)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # it leads its own process group
            log.warning("mcp_server_killed", extra={"server": self.spec.name, "pid": pid})
        release(pid)

    def _with_log_tail(self, reason: str) -> str:
        """Add the last line the server wrote to stderr: it usually says what went wrong."""
        if self.log_path is None or not self.log_path.exists():
            return reason
        with open(self.log_path, "rb") as fh:
            fh.seek(self._log_start)
            lines = [ln.strip() for ln in fh.read()[-2000:].decode(errors="replace").splitlines()]
        last = next((ln for ln in reversed(lines) if ln), "")
        return f"{reason}: {last[-300:]}" if last else reason


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, PRIVATE_FILE)


async def _first(*events: asyncio.Event) -> None:
    """Return when any of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def _pump(read: Any, forward: Any, closed: asyncio.Event) -> None:
    """Pass the transport's messages to the session; note when the stream ends (EOF)."""
    try:
        async with forward:
            async for item in read:
                await forward.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        closed.set()


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    """Every page of ``tools/list``."""
    out: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        out.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return out


def _listed(tool: types.Tool) -> ListedTool:
    """One listed tool as plain data."""
    notes = tool.annotations.model_dump(by_alias=True, exclude_none=True) \
        if tool.annotations else {}
    return ListedTool(name=tool.name, description=tool.description or "",
                      input_schema=tool.input_schema, annotations=notes)


def unusable(tool: types.Tool) -> str | None:
    """Why a listed tool is left out (None: it is taken): a name MCP does not allow (a
    card shows it as it is), or a definition too large to hand a model on every turn."""
    if not allowed_mcp_tool(tool.name):
        return "names of 1-128 letters, digits, '_', '-' or '.' only"
    said = tool.model_dump_json(include={"description", "input_schema", "annotations"})
    if len(said.encode()) > MAX_DEFINITION:
        return (f"a description, input schema and hints of at most {MAX_DEFINITION // 1024} "
                f"KiB of JSON (they go to the model on every turn)")
    return None


def tool_output(name: str, result: types.CallToolResult) -> dict[str, Any]:
    """A CallToolResult as the engine's output dict; ``isError`` becomes a ToolError."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(f"{name}: {text.strip() or 'the tool reported an error'}")
    out: dict[str, Any] = {"text": text}
    if result.structured_content is not None:
        # Kept with the task's record, which must stay readable (see runtime.bounds).
        if too_deep_at(result.structured_content) is None:
            out["structured"] = result.structured_content
        else:
            out["structured_dropped"] = TOO_DEEP
    other = [_describe_block(b) for b in result.content if not isinstance(b, types.TextContent)]
    if other:
        out["content"] = other
    return out


def _describe_block(block: Any) -> dict[str, Any]:
    """A non-text content block without its base64 payload (images, audio, blobs)."""
    data = block.model_dump(by_alias=True, exclude_none=True)
    data.pop("data", None)
    if isinstance(data.get("resource"), dict):
        data["resource"].pop("blob", None)
    return dict(data)


def describe(exc: BaseException, spec: McpServerSpec) -> str:
    """Why a start failed, in words (the innermost error of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    program = spec.command[0] if spec.command else spec.url
    if isinstance(exc, FileNotFoundError):
        return f"cannot start {program!r}: command not found"
    if isinstance(exc, PermissionError):
        return f"cannot start {program!r}: not executable"
    if isinstance(exc, TimeoutError):
        return f"no answer within {spec.connect_timeout:g}s"
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        return "the server closed the connection during start-up"
    if isinstance(exc, MCPError):
        return f"the server failed during start-up: {exc.message}"
    if isinstance(exc, OSError) and spec.command:
        return f"cannot start {program!r}: {exc.strerror or exc}"
    if spec.url:  # the HTTP client's errors: refused, DNS, TLS, an HTTP status
        return f"cannot reach {spec.url}: {exc or type(exc).__name__}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
