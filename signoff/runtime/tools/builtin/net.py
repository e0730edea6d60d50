"""HTTP tools: http_get (READ) and send_webhook (SEND), both over httpx with a timeout.

Only http and https URLs are accepted; the check runs when the action is prepared, so a
``file://`` or ``ftp://`` URL fails before anyone is asked to approve it. The fingerprint
is the URL alone: a webhook grant covers later posts to the same URL whatever the payload.
Where a request may go (never the daemon itself; a private network only when the policy
asked a person about it; a redirect only where no one would need asking) is the policy's
network rule, `signoff.runtime.policy.net`, which checks every hop as it connects.
"""

from __future__ import annotations

from typing import Any

import httpx

from signoff.errors import BadArguments, ToolError
from signoff.runtime.models import RiskClass
from signoff.runtime.policy.net import GuardedTransport
from signoff.runtime.tools.base import Param, ToolContext, decode_prefix, tail

# Response headers worth showing; the rest (cookies above all) stays out of the output.
KEPT_HEADERS = (
    "content-type",
    "content-length",
    "content-encoding",
    "last-modified",
    "etag",
    "location",
    "retry-after",
)


def check_url(url: str) -> str:
    """``url`` as httpx will contact it (scheme and host in lower case, IDNA, no default
    port, the path percent-encoded), or BadArguments unless it is an absolute http(s) URL.

    The tools' targets and fingerprints are this spelling, so a policy or a person judges
    the host that is contacted: "*prod*" in a Cedar forbid must hold for
    ``https://api.PROD.example.com`` too, a host name being the same in any case."""
    url = url.strip()
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise BadArguments(f"url {url!r} is not a valid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise BadArguments(f"url {url!r}: only http and https URLs are allowed")
    if not parsed.host:
        raise BadArguments(f"url {url!r} has no host")
    return str(parsed)


async def _read_capped(response: httpx.Response, limit: int) -> tuple[str, bool]:
    """Read at most ``limit`` bytes of a streamed body, so a huge download cannot fill memory."""
    chunks: list[bytes] = []
    size = 0
    truncated = False
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            truncated = True
            break
        chunks.append(chunk)
        size += len(chunk)
    return decode_prefix(b"".join(chunks), truncated=truncated), truncated


def _client(ctx: ToolContext, *, follow_redirects: bool = False) -> httpx.AsyncClient:
    """A client whose every hop the policy's network rule checks and pins (see
    `signoff.runtime.policy.net`); no proxy from the environment, which would hide the
    real destination."""
    transport = GuardedTransport(ctx.net, private_ok=ctx.private_ok)
    return httpx.AsyncClient(timeout=ctx.http_timeout, follow_redirects=follow_redirects,
                             transport=transport, trust_env=False)


def _http_error(tool: str, url: str, exc: httpx.HTTPError, timeout: float) -> ToolError:
    if isinstance(exc, httpx.TimeoutException):
        return ToolError(f"{tool} {url}: timed out after {timeout:g}s")
    return ToolError(f"{tool} {url}: {exc or type(exc).__name__}")


class _UrlTool:
    """Shared shape: the ``url`` argument is the target and the whole fingerprint."""

    name: str
    capability: str
    description: str
    params: tuple[Param, ...]
    risk: RiskClass
    verb: str  # how a card says it: "Fetch", "POST a webhook to"
    content: tuple[str, ...] = ()

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return self.risk

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"url": check_url(args["url"])}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return (check_url(args["url"]),)

    def summary(self, args: dict[str, Any]) -> str:
        return f"{self.verb} {args['url']}"


class HttpGetTool(_UrlTool):
    """Fetch a URL."""

    name = "http_get"
    verb = "Fetch"
    capability = "net.fetch"
    description = "Fetch an http(s) URL and return its status, main headers and text."
    params: tuple[Param, ...] = (
        Param("url", str, description="An absolute http:// or https:// URL."),
    )
    risk = RiskClass.READ

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        url = check_url(args["url"])
        try:
            async with (
                _client(ctx, follow_redirects=True) as client,
                client.stream("GET", url) as response,
            ):
                text, truncated = await _read_capped(response, ctx.output_limit)
        except httpx.HTTPError as exc:
            raise _http_error(self.name, url, exc, ctx.http_timeout) from exc
        # A 404 is an answer, not a tool failure: the caller sees the status and decides.
        return {
            "url": str(response.url),
            "status": response.status_code,
            "headers": {k: response.headers[k] for k in KEPT_HEADERS if k in response.headers},
            "text": text,
            "truncated": truncated,
        }


class SendWebhookTool(_UrlTool):
    """POST a JSON payload to a URL."""

    name = "send_webhook"
    verb = "POST a webhook to"
    content = ("payload",)
    capability = "net.post"
    description = "POST a JSON payload to an http(s) webhook URL."
    params: tuple[Param, ...] = (
        Param("url", str, description="An absolute http:// or https:// URL."),
        Param("payload", object, description="The JSON body to post."),
    )
    risk = RiskClass.SEND

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        url = check_url(args["url"])
        try:
            # No redirects: a POST that silently lands somewhere else was not approved.
            # The answer is read up to output_limit, as http_get's: a server answering
            # without end would hold the step and fill the daemon's memory.
            async with (
                _client(ctx) as client,
                client.stream("POST", url, json=args["payload"]) as response,
            ):
                text, truncated = await _read_capped(response, ctx.output_limit)
        except httpx.HTTPError as exc:
            raise _http_error(self.name, url, exc, ctx.http_timeout) from exc
        except (TypeError, ValueError) as exc:  # payload not JSON-serializable
            raise BadArguments(f"send_webhook: payload is not JSON: {exc}") from exc
        if not response.is_success:
            raise ToolError(
                f"send_webhook {url}: the server answered {response.status_code}"
                + (f": {tail(text, 300)}" if text.strip() else "")
            )
        return {"url": url, "status": response.status_code, "text": text,
                "truncated": truncated}
