"""`signoff mcp-gate SERVER`: signoff's approvals in front of an MCP server, for an outside
MCP client (an IDE, Claude Code, another agent).

The gate is an MCP server, on stdio or (``--http``) the SDK's streamable HTTP transport
(the official SDK's low-level `Server`), that proxies the ``[[mcp.servers]]`` entry
SERVER (kept alive by the same `McpConnection` the daemon uses). ``tools/list`` is the
upstream's listing, unchanged. Each ``tools/call`` is first checked against the tool's
inputSchema, then asked of the running daemon through the SDK (``POST /v1/approvals``,
policy_id as below, labels from the server's tool rules), and only an approved call is
forwarded; its result goes back unchanged. A person may approve it with edited args (the
request is asked ``editable``): those are checked against the inputSchema again and
forwarded instead, never the asked ones. Anything else (denied, blocked, expired, the
daemon unreachable) is an ``isError`` result saying
"not approved: …", so the model knows it did not get consent (fail closed).

While a person has not answered, the call waits (up to ``approvals.timeout``) and, when the
client gave a progress token, a progress notification goes out at once and then every few
seconds, so the client neither times out nor looks hung. A call the client cancels
(``notifications/cancelled``) or leaves behind by disconnecting withdraws its request, so
nobody is asked about a call no one waits for.

The upstream's prompts and resources (``prompts/list``, ``prompts/get``,
``resources/list``, ``resources/templates/list``, ``resources/read``) are passed through
unchanged and never gated: reading them has no effect. Subscriptions (so
``notifications/resources/updated``) and completions are not offered.

The gate advertises ``listChanged`` for tools, prompts and resources, and passes each
change on to every client session that listed that list (`Gate.forward_changes`, one rule
for the three). Tools: when the upstream's listing changes (it sent
``notifications/tools/list_changed``, or came back from a restart with other tools), each
session that listed the tools gets ``notifications/tools/list_changed``, sent once the
gate holds the new listing, so the client's next ``tools/list`` shows it. A call is
always judged, and its grant bound, by the tool as the upstream lists it at that moment
(a call that comes between the upstream's notice and its new listing waits for that
listing); a tool the upstream no longer lists is refused. Prompts and resources, which
the gate does not hold: when the upstream sends ``notifications/prompts/list_changed`` or
``notifications/resources/list_changed``, or comes back from a restart (they may then
differ), each session that listed them (``prompts/list``; ``resources/list`` or
``resources/templates/list``) gets the same notice. Clients on the 2026-07-28 protocol,
which get such notices only on a ``subscriptions/listen`` stream the gate does not serve,
are not told (nor is listChanged advertised to them).

The policy_id (what a session or always answer covers) is ``--policy-id`` (one id for
every client, on either transport) or, by default, on stdio ``mcp-gate:SERVER:CLIENT``
with the client's name from its ``initialize`` (stable, so an Always survives the host
restarting the gate) and over HTTP ``mcp-gate:SERVER:session:<Mcp-Session-Id>``: each
client session its own, as HTTP clients share one gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import mcp_types as types
import uvicorn
from mcp.server.connection import Connection
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from signoff._version import __version__
from signoff.client import Decision, Signoff
from signoff.errors import BadArguments, ToolError
from signoff.runtime.bounds import check_json
from signoff.runtime.tools.mcp.connection import McpConnection
from signoff.runtime.tools.mcp.tool import McpTool

log = logging.getLogger(__name__)

PROGRESS_EVERY = 5.0  # seconds between progress notifications while a person decides
GRACE = 30.0  # waited past approvals.timeout for the daemon's own expiry to land

Progress = Callable[[str], Awaitable[None]]
T = TypeVar("T")
# The notice a client connection gets when the upstream's list changes, by list (see
# `McpConnection.lists`); the capabilities `GateServer` advertises follow these.
NOTICES: dict[str, Callable[[Connection], Awaitable[None]]] = {
    "tools": Connection.send_tool_list_changed,
    "prompts": Connection.send_prompt_list_changed,
    "resources": Connection.send_resource_list_changed,
}


def refused(text: str) -> types.CallToolResult:
    """A tool result that tells the model the call did not happen."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                is_error=True)


class Gate:
    """The gate in front of one upstream, for every client session it serves (one on
    stdio; over HTTP, each client's own, all at once): decides and forwards their calls,
    and tells each session that listed something when the upstream's list changes."""

    def __init__(self, *, upstream: McpConnection, client: Signoff, wait_limit: float,
                 progress_every: float = PROGRESS_EVERY, policy_id: str | None = None) -> None:
        self.upstream = upstream
        self.client = client
        self.wait_limit = wait_limit
        self.progress_every = progress_every
        self.policy_id = policy_id  # None: per client (`policy_for`)
        self.waiting: set[str] = set()  # requests a call of any session waits on
        # The client connections (the SDK's `Connection`) that listed tools, prompts or
        # resources, each with the count of the upstream's `lists` it was last given or
        # told of, by list: told when the count moves past it, forgotten when they close.
        self.listeners: dict[Any, dict[str, int]] = {}
        self._listened = asyncio.Event()  # a connection was given a list already stale

    def policy_for(self, client_name: str | None, session_id: str | None = None) -> str:
        """The policy_id of a call: as configured, else the HTTP session's own, else stable
        per server and client."""
        if self.policy_id:
            return self.policy_id
        if session_id:
            return f"mcp-gate:{self.upstream.spec.name}:session:{session_id}"
        return f"mcp-gate:{self.upstream.spec.name}:{client_name or 'unknown-client'}"

    async def withdraw_all(self) -> None:
        """Withdraw what calls still wait on (the gate stops: on stdio, its client went
        away); never cancelled."""
        with anyio.CancelScope(shield=True):
            for approval_id in list(self.waiting):
                await self.client.withdraw(approval_id)
            self.waiting.clear()

    async def list_tools(self, ctx: Any = None) -> types.ListToolsResult:
        """The upstream's tools as it listed them; the client of ``ctx`` (a request's
        context) is told when they change."""
        await self.upstream.wait_up(self.upstream.spec.connect_timeout)
        if ctx is not None:
            self.listens(ctx, "tools", self.upstream.lists["tools"])
        return types.ListToolsResult(tools=list(self.upstream.raw_tools))

    def listens(self, ctx: Any, kind: str, held: int) -> None:
        """Note that the client connection of ``ctx`` was given the upstream's list
        ``kind`` ("tools", "prompts" or "resources") as of count ``held``: it is told
        (`forward_changes`) once that list's count is past it, at once if it already is.
        Not on the 2026-07-28 protocol (see the module docstring)."""
        connection = getattr(ctx.session, "_connection", None)
        if connection is None or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        if connection not in self.listeners:
            connection.exit_stack.callback(self.listeners.pop, connection, None)
        self.listeners.setdefault(connection, {})[kind] = held
        if held < self.upstream.lists[kind]:  # it changed while the answer was on its way
            self._listened.set()

    async def forward_changes(self) -> None:
        """Tell each listening client connection when a list it was given has changed
        upstream (for tools, once the gate has the new listing); runs until cancelled. A
        notice is best-effort (the SDK drops one for a client that went away)."""
        while True:
            self._listened.clear()
            now = dict(self.upstream.lists)
            for kind, notice in NOTICES.items():
                stale = [c for c, held in self.listeners.items()
                         if held.get(kind, now[kind]) < now[kind]]
                if stale:
                    log.info("gate_list_changed", extra={
                        "server": self.upstream.spec.name, "list": kind,
                        "clients": len(stale)})
                for connection in stale:
                    await self._tell(connection, kind, now[kind], notice)
            if self.upstream.lists == now and not self._listened.is_set():
                await _first(self.upstream.changed_after(now), self._listened.wait())

    async def _tell(self, connection: Any, kind: str, count: int,
                    notice: Callable[[Connection], Awaitable[None]]) -> None:
        """Send ``connection`` the ``notice`` that its list ``kind`` is now at ``count``."""
        held = self.listeners.get(connection)
        if held is not None:  # else it closed meanwhile
            held[kind] = max(held[kind], count)
        try:
            await notice(connection)
        except Exception:  # one client's broken stream must not silence the rest
            log.warning("gate_notice_failed", exc_info=True,
                        extra={"server": self.upstream.spec.name, "list": kind})

    async def call_tool(self, name: str, arguments: dict[str, Any] | None,
                        progress: Progress | None = None, *, client_name: str | None = None,
                        session_id: str | None = None,
                        traceparent: str | None = None) -> types.CallToolResult:
        """Ask the daemon, then forward an approved call; refuse anything else."""
        try:
            check_json(arguments or {}, "arguments")
            tool = await self.upstream.listed(name)
            args = tool.clean_args(dict(arguments or {}))
        except BadArguments as exc:
            return refused(f"invalid arguments: {exc}")
        except ToolError as exc:
            return refused(str(exc))
        decision = await self._decide(tool, args, progress,
                                      self.policy_for(client_name, session_id), traceparent)
        if not decision.approved:
            log.info("gate_refused", extra={"tool": tool.name, "status": decision.status})
            return refused(f"not approved: {decision.describe()}")
        if decision.edited:  # a person approved other args: those run, or nothing
            try:
                args = tool.clean_args(dict(decision.args or {}))
            except ToolError as exc:
                await self._report(decision, ok=False, detail=f"edited args: {exc}")
                return refused(f"approved with edited args that {name} refuses: {exc}; "
                               "the call was not run")
        try:
            result = await self.upstream.call_raw(name, args)
        except ToolError as exc:
            await self._report(decision, ok=False, detail=str(exc))
            return refused(str(exc))
        detail = result_text(result) if result.is_error else None
        await self._report(decision, ok=not result.is_error, detail=detail)
        return result

    async def _decide(self, tool: McpTool, args: dict[str, Any], progress: Progress | None,
                      policy_id: str, traceparent: str | None = None) -> Decision:
        decision = await self.client.request(
            tool=tool.name, args=args, policy_id=policy_id,
            risk=tool.risk_for(args).value, capability=tool.capability,
            targets=tool.targets(args), content=tool.content,
            goal=f"an MCP client calls {tool.name} through signoff mcp-gate", wait=False,
            editable=True, traceparent=traceparent, definition=tool.definition,
            description=tool.said)
        if not decision.pending or decision.id is None:
            return decision
        asked = decision.id
        self.waiting.add(asked)
        try:
            waited = 0.0
            while decision.pending and waited < self.wait_limit:
                if progress is not None:
                    await progress(f"waiting for approval {asked} of {tool.name}")
                decision = await self.client.wait(asked, timeout=self.progress_every)
                waited += self.progress_every
        except BaseException:  # cancelled by the client, or the session ends: take it back
            with anyio.CancelScope(shield=True):
                await self.client.withdraw(asked)
            raise
        finally:
            self.waiting.discard(asked)
        return decision

    async def _report(self, decision: Decision, *, ok: bool, detail: str | None = None) -> None:
        if decision.id is not None:
            await self.client.report(decision.id, ok=ok, detail=detail)

    def server(self) -> Server[Any]:
        """The MCP server the outside client talks to."""
        async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return await self.list_tools(ctx)

        async def on_call_tool(ctx: Any, params: types.CallToolRequestParams
                               ) -> types.CallToolResult:
            return await self.call_tool(params.name, params.arguments,
                                        progress_sender(ctx, params),
                                        client_name=client_name(ctx),
                                        session_id=session_id(ctx),
                                        traceparent=trace_of(params))

        return GateServer("signoff-mcp-gate", version=__version__,
                          instructions=f"Tools of {self.upstream.spec.name}; each call is "
                                       "approved by a person through signoff first.",
                          on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                          **ReadOnly(self.upstream, self.listens).handlers())


class GateServer(Server[Any]):
    """The SDK's low-level server, advertising ``listChanged`` for the lists whose
    changes the gate passes on (`NOTICES`: tools, prompts, resources) on every
    transport: the streamable HTTP manager builds each session's ``initialize`` answer
    from `create_initialization_options` with no options of its own."""

    def create_initialization_options(
        self, notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(
                tools_changed="tools" in NOTICES, prompts_changed="prompts" in NOTICES,
                resources_changed="resources" in NOTICES),
            experimental_capabilities, extensions)


class ReadOnly:
    """The upstream's prompts and resources, forwarded unchanged: reading them causes no
    effect, so nothing is asked. A server that offers none lists none. A client that
    lists them is noted (``listens``, `Gate.listens`), to be told when they change."""

    def __init__(self, upstream: McpConnection,
                 listens: Callable[[Any, str, int], None]) -> None:
        self.upstream = upstream
        self.listens = listens

    def handlers(self) -> dict[str, Any]:
        """The low-level Server's handlers for the read-only requests."""
        return {"on_list_prompts": self.list_prompts, "on_get_prompt": self.get_prompt,
                "on_list_resources": self.list_resources,
                "on_list_resource_templates": self.list_resource_templates,
                "on_read_resource": self.read_resource}

    async def _forward(self, part: str, what: str, call: Callable[[Any], Awaitable[T]],
                       empty: T | None = None, *, listed_by: Any = None) -> T:
        """``what`` as the upstream answers it; ``listed_by``, the context of a listing
        of ``part``: its client is told when ``part`` changes."""
        await self.upstream.wait_up(self.upstream.spec.connect_timeout)
        held = self.upstream.lists[part]  # before the answer, which may miss a change
        if empty is not None and not self.upstream.offers(part):
            answer = empty
        else:
            try:
                answer = await self.upstream.forward(what, call)
            except ToolError as exc:
                raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
        if listed_by is not None:
            self.listens(listed_by, part, held)
        return answer

    async def list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None
                           ) -> types.ListPromptsResult:
        return await self._forward("prompts", "prompts/list",
                                   lambda s: s.list_prompts(params=params),
                                   types.ListPromptsResult(prompts=[]), listed_by=ctx)

    async def get_prompt(self, ctx: Any, params: types.GetPromptRequestParams
                         ) -> types.GetPromptResult:
        return await self._forward("prompts", f"prompts/get {params.name}",
                                   lambda s: s.get_prompt(params.name, params.arguments))

    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None
                             ) -> types.ListResourcesResult:
        return await self._forward("resources", "resources/list",
                                   lambda s: s.list_resources(params=params),
                                   types.ListResourcesResult(resources=[]), listed_by=ctx)

    async def list_resource_templates(self, ctx: Any,
                                      params: types.PaginatedRequestParams | None
                                      ) -> types.ListResourceTemplatesResult:
        return await self._forward("resources", "resources/templates/list",
                                   lambda s: s.list_resource_templates(params=params),
                                   types.ListResourceTemplatesResult(resource_templates=[]),
                                   listed_by=ctx)

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams
                            ) -> types.ReadResourceResult:
        return await self._forward("resources", f"resources/read {params.uri}",
                                   lambda s: s.read_resource(str(params.uri)))


async def serve_http(server: Server[Any], address: HttpAddress) -> None:
    """The gate on the SDK's streamable HTTP transport (sessions, DNS-rebinding checks for
    loopback hosts) under uvicorn, until SIGTERM or SIGINT. A session the client ends
    (DELETE) or that goes idle cancels its calls, which withdraws their requests."""
    listener = bind(address)
    app = server.streamable_http_app(streamable_http_path=address.path, host=address.host)
    # proxy_headers off: uvicorn would otherwise take a local caller's X-Forwarded-For
    # for its address (as the daemon, see signoff.wiring.daemon.server_config).
    web = _Web(uvicorn.Config(app, log_level="warning", lifespan="on", proxy_headers=False))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # stop serving, then withdraw (finally)
        loop.add_signal_handler(sig, web.stop)
    serving = asyncio.create_task(web.serve(sockets=[listener]))
    listening = asyncio.create_task(web.listening.wait())
    await asyncio.wait({serving, listening}, return_when=asyncio.FIRST_COMPLETED)
    listening.cancel()
    if web.listening.is_set():  # the host learns where to connect (stdout is not MCP here)
        print(f"signoff mcp-gate: serving at {address.url}", file=sys.stderr, flush=True)
    try:
        await serving
    finally:
        web.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)
        listener.close()


def bind(address: HttpAddress) -> socket.socket:
    """The listening socket, bound before anything is served: a port in use is one clear
    error."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    # IPPROTO_TCP so that asyncio sets TCP_NODELAY on each connection (see bind_port)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
    except OSError as exc:
        sock.close()
        raise BadArguments(f"cannot listen on {address.host}:{address.port}: "
                           f"{exc.strerror or exc}") from None
    return sock


class _Web(uvicorn.Server):
    """uvicorn without its own signal handling: a signal it captured is raised again after
    shutdown, which would end the process before the gate withdraws what calls wait on."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:  # the app's lifespan started (else should_exit is set)
            self.listening.set()

    def stop(self) -> None:
        self.should_exit = True


async def _first(*waits: Awaitable[Any]) -> None:
    """Return when any of ``waits`` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def result_text(result: types.CallToolResult) -> str:
    """The text of a tool result (what an ``isError`` result says went wrong)."""
    parts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    return "\n".join(parts)[:500] or "the tool reported an error"


def client_name(ctx: Any) -> str | None:
    """The MCP client's name from its ``initialize`` (None when it gave none)."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return str(name) if name else None


def session_id(ctx: Any) -> str | None:
    """The HTTP session (``Mcp-Session-Id``) a request came in on; None on stdio and for
    sessionless HTTP. The SDK keeps it on the session's connection only."""
    connection = getattr(ctx.session, "_connection", None)
    value = getattr(connection, "session_id", None)
    return str(value) if value else None


def trace_of(params: types.CallToolRequestParams) -> str | None:
    """The client's W3C trace context from the call's ``_meta.traceparent`` (bounded; the
    daemon ignores a malformed one): signoff's spans of this call join the client's trace."""
    value = (params.meta or {}).get("traceparent")
    return value[:128] if isinstance(value, str) else None


def progress_sender(ctx: Any, params: types.CallToolRequestParams) -> Progress | None:
    """Progress notifications for this call, if the client asked for them."""
    token = (params.meta or {}).get("progress_token")
    if token is None:
        return None
    sent = 0

    async def send(message: str) -> None:
        nonlocal sent
        sent += 1
        await ctx.session.send_progress_notification(token, float(sent), None, message,
                                                     related_request_id=ctx.request_id)
    return send


@dataclass(frozen=True)
class HttpAddress:
    """Where ``mcp-gate --http`` listens: loopback only (the endpoint has no sign-in of
    its own; every call is still decided by a person)."""

    host: str = "127.0.0.1"
    port: int = 8765
    path: str = "/mcp"

    def __post_init__(self) -> None:
        if self.host not in LOOPBACK:
            raise BadArguments(f"--host {self.host!r}: the gate's HTTP endpoint has no "
                               f"authentication of its own, so it listens on loopback only "
                               f"({', '.join(LOOPBACK)})")

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"


LOOPBACK = ("127.0.0.1", "localhost", "::1")


async def serve_gate(upstream: McpConnection, *, url: str | None, api_key: str | None,
                     wait_limit: float, policy_id: str | None = None,
                     http: HttpAddress | None = None) -> None:
    """Run the gate on this process's stdin/stdout until the client closes it, or (with
    ``http``) over streamable HTTP until the process is stopped."""
    keep_up = asyncio.create_task(upstream.run(), name=f"mcp-{upstream.spec.name}")
    try:
        requester = f"mcp-gate:{upstream.spec.name}@{socket.gethostname()}"
        async with Signoff(url, api_key=api_key, requester=requester) as client:
            gate = Gate(upstream=upstream, client=client, wait_limit=wait_limit,
                        policy_id=policy_id)
            server = gate.server()
            forwarding = asyncio.create_task(gate.forward_changes())
            try:
                if http is not None:
                    await serve_http(server, http)
                else:
                    async with stdio_server() as (read, write):
                        await server.run(read, write, server.create_initialization_options())
            finally:  # the client disconnected: nobody waits for its calls any more
                forwarding.cancel()
                await asyncio.gather(forwarding, return_exceptions=True)
                await gate.withdraw_all()
    finally:
        keep_up.cancel()  # stops the upstream server process
        await asyncio.gather(keep_up, return_exceptions=True)
