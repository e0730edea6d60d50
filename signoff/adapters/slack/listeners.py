"""Slack's native events read into signoff's neutral values: pure functions.

A ``block_actions`` payload (https://docs.slack.dev/reference/interaction-payloads/block_actions-payload)
carries who clicked (``user``), which button (``actions[0].action_id``/``value``) and where
the card lives (``container.channel_id``/``message_ts``). Anything missing or odd gives None:
the caller logs it and ignores the click, nothing is decided.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from signoff.adapters.slack.blocks import scope_of_action
from signoff.bot.ports import Actor, CardRef, DecisionEvent

SURFACE = "slack"
# Our approval ids are short; a longer button value was not written by us.
MAX_APPROVAL_ID = 200


def parse_http_body(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The payload of an HTTP request from Slack, as bolt will read it.

    Interactions come form-encoded as ``payload=<JSON>``, Events API requests as JSON.
    Raises ValueError for anything that is not a JSON object there.
    """
    text = body.decode("utf-8")  # UnicodeDecodeError is a ValueError
    stripped = text.lstrip()
    if (content_type or "").startswith("application/json") or stripped.startswith("{"):
        parsed: object = json.loads(text)
    else:
        form = dict(parse_qsl(text, keep_blank_values=True))
        if "payload" not in form:
            return dict(form)
        parsed = json.loads(form["payload"])
    if not isinstance(parsed, dict):
        raise ValueError("the payload is not a JSON object")
    if parsed.get("type") == "block_actions":
        # bolt's action matcher indexes these blindly; refuse what it would crash on.
        actions = parsed.get("actions")
        if not isinstance(actions, list) or not all(
                isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions):
            raise ValueError("block_actions without a list of actions")
    return parsed


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def card_ref(body: Mapping[str, Any]) -> CardRef | None:
    """Where the clicked card lives, from ``container`` (or ``channel``/``message``)."""
    container = _mapping(body.get("container"))
    channel = _text(container.get("channel_id")) or _text(_mapping(body.get("channel")).get("id"))
    ts = _text(container.get("message_ts")) or _text(_mapping(body.get("message")).get("ts"))
    if channel is None or ts is None:
        return None
    return CardRef(surface=SURFACE, channel=channel, message_id=ts)


def decision_from_action(body: Mapping[str, Any]) -> DecisionEvent | None:
    """The decision a ``block_actions`` payload stands for, or None if it is malformed."""
    user = _mapping(body.get("user"))
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions:
        return None
    action = _mapping(actions[0])
    scope = scope_of_action(_text(action.get("action_id")) or "")
    approval_id = _text(action.get("value"))
    user_id = _text(user.get("id"))
    if scope is None or approval_id is None or user_id is None:
        return None
    if len(approval_id) > MAX_APPROVAL_ID:
        return None
    display = _text(user.get("username")) or _text(user.get("name"))
    return DecisionEvent(
        approval_id=approval_id,
        scope=scope,
        actor=Actor(platform=SURFACE, user_id=user_id, display=display),
        surface=SURFACE,
        ref=card_ref(body),
    )
