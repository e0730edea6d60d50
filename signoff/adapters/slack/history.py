"""Finding our own cards again in a Slack channel, by the message metadata they carry.

Every card is posted with ``metadata = {"event_type": "signoff_approval", "event_payload":
{"approval_id": …}}``. A post can fail ambiguously: Slack may have stored the message and
still answered 5xx, or the answer may have timed out. Posting again would leave a second
card whose buttons stay live forever, so the retry first reads the channel's newest
messages (``conversations.history`` with ``include_all_metadata=true``) and adopts the
copies it finds. No timestamps are compared: Slack's ``ts`` is the server's clock, ours
may differ, and a retry comes seconds or minutes after the post, so the newest few
hundred messages are the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from signoff.adapters.slack.calls import call

EVENT_TYPE = "signoff_approval"
PAGE_SIZE = 100
MAX_PAGES = 3
HISTORY_SCOPES = ("channels:history", "groups:history")  # public / private channels


def card_metadata(approval_id: str) -> dict[str, Any]:
    """The ``metadata`` argument of a card's ``chat.postMessage``."""
    return {"event_type": EVENT_TYPE, "event_payload": {"approval_id": approval_id}}


def copies(messages: Iterable[object], approval_id: str, bot_id: str | None) -> list[str]:
    """The ``ts`` of every top-level message in ``messages`` that is a card of ``approval_id``.

    With ``bot_id`` known (from ``auth.test``), only our own messages count: another app
    could send the same metadata, and its message could not be edited by us anyway.
    """
    found = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        metadata = message.get("metadata")
        if not isinstance(metadata, Mapping) or metadata.get("event_type") != EVENT_TYPE:
            continue
        payload = metadata.get("event_payload")
        if not isinstance(payload, Mapping) or payload.get("approval_id") != approval_id:
            continue
        if bot_id is not None and message.get("bot_id") != bot_id:
            continue
        ts = message.get("ts")
        if isinstance(ts, str) and message.get("thread_ts", ts) == ts:
            found.append(ts)
    return found


async def find_copies(client: AsyncWebClient, *, channel: str, approval_id: str,
                      bot_id: str | None) -> list[str]:
    """The ``ts`` of the cards of ``approval_id`` among the channel's newest messages,
    oldest first; Slack's refusals and outages raise as in `calls`."""
    found: list[str] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        response = await call("conversations.history", client.conversations_history(
            channel=channel, include_all_metadata=True, limit=PAGE_SIZE, cursor=cursor))
        found += copies(response.get("messages") or [], approval_id, bot_id)
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not response.get("has_more") or cursor is None:
            break
    return sorted(found, key=float)
