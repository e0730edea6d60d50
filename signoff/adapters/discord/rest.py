"""Discord's REST API over httpx: one client, the bot token, errors turned into ours.

Every failure becomes the port's error the outbox understands: 429 (per route or the
global limit) is `RateLimited` with Discord's ``retry_after``; a 5xx or a network failure
is `PlatformUnavailable`; anything else Discord refuses is `PlatformRejected` naming
Discord's own error code and message. Nothing is retried here — the durable outbox owns
retries for every surface — but after a 429 the route (or, for the global limit, every
route) is not called again until ``retry_after`` has passed: the call fails at once with
`RateLimited`, since Discord bans a bot that keeps hitting a limit. That time is read from
the injected clock.

The bot token is sent only in the Authorization header and never appears in an error or
a log line; interaction tokens (in webhook paths) are left out of messages too.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx

from signoff.errors import PlatformRejected, PlatformUnavailable, RateLimited
from signoff.runtime.clock import Clock

log = logging.getLogger(__name__)


def _user_agent() -> str:
    """Discord asks every bot for a User-Agent of the form "DiscordBot ($url, $version)".
    (The version comes from the installed metadata: importing the package root from an
    adapter would pull every other adapter in.)"""
    try:
        release = version("signoff")
    except PackageNotFoundError:
        release = "0"
    return f"DiscordBot (https://pypi.org/project/signoff/, {release})"


USER_AGENT = _user_agent()
_ROUTE = re.compile(r"^/(channels|webhooks)/(\d+)")  # the major parameter of a route
_GLOBAL = "global"


def route_key(path: str) -> str:
    """The rate-limit scope of a path: its major parameter (a channel, a webhook)."""
    found = _ROUTE.match(path)
    return f"{found.group(1)}/{found.group(2)}" if found else path.split("?", maxsplit=1)[0]


def shown(path: str) -> str:
    """A path fit for a message: an interaction token replaced by ``…``."""
    return re.sub(r"^(/webhooks/\d+/)[^/]+", r"\1…", path)


class DiscordRest:
    """The calls signoff makes to Discord, against ``api_base`` (a fake in tests)."""

    def __init__(self, *, api_base: str, bot_token: str, clock: Clock,
                 timeout: float = 10.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._clock = clock
        self._client = httpx.AsyncClient(
            base_url=api_base.rstrip("/"), timeout=timeout, transport=transport,
            headers={"Authorization": f"Bot {bot_token}", "User-Agent": USER_AGENT})
        self._blocked: dict[str, datetime] = {}  # route key (or "global") -> until

    async def aclose(self) -> None:
        """Release the connections."""
        await self._client.aclose()

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request; the decoded JSON answer (None for 204)."""
        key = route_key(path)
        self._wait_out(method, path, key)
        try:
            response = await self._client.request(method, path, json=body)
        except httpx.TimeoutException as exc:
            raise PlatformUnavailable(f"discord: {method} {shown(path)} timed out") from exc
        except httpx.HTTPError as exc:
            raise PlatformUnavailable(
                f"discord: {method} {shown(path)} failed: {type(exc).__name__}") from exc
        if response.status_code == 429:
            raise self._limited(method, path, key, response)
        if response.status_code >= 500:
            raise PlatformUnavailable(
                f"discord: {method} {shown(path)} answered {response.status_code}")
        if response.status_code >= 400:
            raise PlatformRejected(_refusal(method, path, response))
        return response.json() if response.content else None

    def _wait_out(self, method: str, path: str, key: str) -> None:
        now = self._clock.now()
        for scope in (_GLOBAL, key):
            until = self._blocked.get(scope)
            if until is None:
                continue
            if until <= now:
                del self._blocked[scope]
                continue
            raise RateLimited(f"discord: {method} {shown(path)} waits out a rate limit "
                              f"({scope})", retry_after=(until - now).total_seconds())

    def _limited(self, method: str, path: str, key: str,
                 response: httpx.Response) -> RateLimited:
        data = _json(response)
        retry_after = _seconds(data.get("retry_after"), response.headers.get("retry-after"))
        is_global = bool(data.get("global")) or response.headers.get(
            "x-ratelimit-global", "").lower() == "true"
        scope = _GLOBAL if is_global else key
        self._blocked[scope] = self._clock.now() + timedelta(seconds=retry_after)
        log.warning("discord_rate_limited method=%s route=%s scope=%s retry_after=%.3f",
                    method, shown(path), scope, retry_after)
        return RateLimited(f"discord: {method} {shown(path)} rate limited ({scope}); "
                           f"retry after {retry_after:g} s", retry_after=retry_after)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except (ValueError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _seconds(*values: object) -> float:
    """The first of ``values`` that reads as a non-negative number of seconds, else 1."""
    for value in values:
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if seconds >= 0:
            return seconds
    return 1.0


def _refusal(method: str, path: str, response: httpx.Response) -> str:
    data = _json(response)
    what = f"{data.get('message', 'refused')} (code {data.get('code', '?')})"
    hint = {401: "; the bot token was refused: check discord.bot_token",
            403: "; the bot lacks access or a permission in that channel (View Channel, "
                 "Send Messages, Read Message History)",
            404: "; no such channel or message, or the bot cannot see it"}
    return (f"discord: {method} {shown(path)} answered {response.status_code}: {what}"
            f"{hint.get(response.status_code, '')}")
