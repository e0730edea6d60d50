"""Slack SDK failures turned into signoff's error tree, at the edge.

    SlackApiError HTTP 429 / ``ratelimited``          → RateLimited(retry_after=Retry-After)
    SlackApiError HTTP 5xx / ``internal_error`` …     → PlatformUnavailable
    aiohttp errors, timeouts, refused connections     → PlatformUnavailable
    any other API error (``channel_not_found`` …)     → PlatformRejected naming the error

Messages name the Slack method and error code and, for the errors people can fix, what to
change; they never carry a token or a message body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from signoff.errors import PlatformError, PlatformRejected, PlatformUnavailable, RateLimited

T = TypeVar("T")

# Errors Slack documents as temporary on its side: worth retrying like a 5xx.
RETRYABLE_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "team_added_to_org"}
)
TOKEN_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
     "not_allowed_token_type"}
)
_HINTS = {
    "channel_not_found": "check slack.channel (a channel id such as C0123456789)",
    "not_in_channel": "invite the bot into the channel (/invite @signoff)",
    "is_archived": "the channel is archived; choose another slack.channel",
    "message_not_found": "the card was deleted in Slack",
    "cant_update_message": "the card was not posted by this bot",
    "invalid_blocks": "the card's blocks were refused (a signoff bug: please report it)",
}
DEFAULT_RETRY_AFTER = 1.0


def retry_after(headers: Mapping[str, str] | None) -> float:
    """Seconds from a ``Retry-After`` header; 1 when absent or unreadable."""
    raw = headers.get("Retry-After") if headers is not None else None
    if raw is None and headers is not None:
        raw = headers.get("retry-after")
    try:
        value = float(raw) if raw is not None else DEFAULT_RETRY_AFTER
    except ValueError:
        return DEFAULT_RETRY_AFTER
    return max(value, 0.0)


def _status_and_body(exc: SlackApiError) -> tuple[int, dict[str, Any], Mapping[str, str] | None]:
    response = exc.response
    # The SDK hands over its own response object, or the raw aiohttp one when the body
    # was not JSON (an HTML error page from a proxy, for instance).
    status = getattr(response, "status_code", None) or getattr(response, "status", 0) or 0
    data = getattr(response, "data", None)
    headers = getattr(response, "headers", None)
    return int(status), data if isinstance(data, dict) else {}, headers


def error_code(exc: BaseException | None) -> str:
    """Slack's error code (``invalid_auth`` …) behind a failure, or the exception's name."""
    if isinstance(exc, SlackApiError):
        status, body, _ = _status_and_body(exc)
        return str(body.get("error") or f"http_{status}")
    return type(exc).__name__


def token_problem(error: str, token: str = "slack.bot_token") -> str:
    """Advice for a refused token."""
    return f"Slack refused the token ({error}): check {token} and that the app is installed"


def map_error(method: str, exc: BaseException) -> PlatformError:
    """The signoff error for a failed call to Slack's ``method``."""
    if isinstance(exc, SlackApiError):
        status, body, headers = _status_and_body(exc)
        error = str(body.get("error") or f"http_{status}")
        if status == 429 or error == "ratelimited":
            return RateLimited(f"slack {method}: rate limited", retry_after=retry_after(headers))
        if status >= 500 or error in RETRYABLE_ERRORS:
            return PlatformUnavailable(f"slack {method}: {error} (HTTP {status})")
        message = f"slack {method}: {error}"
        if error == "missing_scope":
            needed = body.get("needed") or "?"
            message += (f" — the token lacks the scope {needed}: add it in the app's"
                        " OAuth & Permissions page and reinstall the app")
        elif error in TOKEN_ERRORS:
            message += f" — {token_problem(error)}"
        elif error in _HINTS:
            message += f" — {_HINTS[error]}"
        return PlatformRejected(message)
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return PlatformUnavailable(f"slack {method}: {type(exc).__name__}")
    # Any other SDK complaint is about the request we built: retrying will not help.
    return PlatformRejected(f"slack {method}: {type(exc).__name__}")


async def call(method: str, request: Awaitable[T]) -> T:
    """Await one Web API call, converting its failures with `map_error`."""
    try:
        return await request
    except (SlackClientError, aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise map_error(method, exc) from exc
