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

from signoff.adapters.slack.blocks import CONSOLE_ACTION, UNDO_ACTION, scope_of_action
from signoff.bot.ports import Actor, CardRef, DecisionEvent
from signoff.runtime.models import Scope

SURFACE = "slack"
# Our approval ids are short; a longer button value was not written by us.
MAX_APPROVAL_ID = 200


# Fields bolt reads while it builds a request's context, before any listener runs, and
# indexes blindly: a Slack id as a string or an object with a string "id" ...
_ID_FIELDS = ("user", "team", "enterprise", "channel")
# ... and objects it looks into.
_OBJECT_FIELDS = ("event", "view", "message", "previous_message", "container", "item",
                  "assistant_thread", "function_data")


def parse_http_body(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The payload of an HTTP request from Slack, as bolt will read it.

    Interactions come form-encoded as ``payload=<JSON>``, Events API requests as JSON.
    Raises ValueError, saying what is wrong, for anything that is not a JSON object there
    or that bolt would crash on (see `shape_problem`).
    """
    text = body.decode("utf-8")  # UnicodeDecodeError is a ValueError
    stripped = text.lstrip()
    try:
        if (content_type or "").startswith("application/json") or stripped.startswith("{"):
            parsed: object = json.loads(text)
        else:
            form = dict(parse_qsl(text, keep_blank_values=True))
            if "payload" not in form:
                return dict(form)
            parsed = json.loads(form["payload"])
    except RecursionError as exc:  # e.g. 100,000 nested "[": json gives up, not a ValueError
        raise ValueError("the payload is nested too deeply") from exc
    if not isinstance(parsed, dict):
        raise ValueError("the payload is not a JSON object")
    problem = shape_problem(parsed)
    if problem is not None:
        raise ValueError(problem)
    return parsed


def shape_problem(payload: Mapping[str, Any]) -> str | None:
    """What in a parsed payload bolt would crash on (a 500), or None if it is safe to pass.

    Only the fields bolt itself touches are checked; whether a click is usable is
    `decision_from_action`'s question (a bad one is acked and ignored).
    """
    kind = payload.get("type")
    if kind is not None and not isinstance(kind, str):
        return "type is not a string"
    for name in _ID_FIELDS:
        value = payload.get(name)
        if value is None or isinstance(value, str):
            continue
        if not isinstance(value, dict) or not isinstance(value.get("id", ""), str):
            return f"{name} is neither a Slack id nor an object with a string id"
    for name in _OBJECT_FIELDS:
        if payload.get(name) is not None and not isinstance(payload[name], dict):
            return f"{name} is not an object"
    authorizations = payload.get("authorizations")
    if authorizations is not None and not (
            isinstance(authorizations, list)
            and all(isinstance(a, dict) and shape_problem(a) is None for a in authorizations)):
        return "authorizations is not a list of objects"
    if kind == "block_actions":
        # bolt's action matcher reads actions[0]["action_id"] without looking.
        actions = payload.get("actions")
        if not isinstance(actions, list) or not actions or not all(
                isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions):
            return "block_actions without a list of actions"
    return None


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


def is_console_link(body: Mapping[str, Any]) -> bool:
    """True for a click on a step-up card's console link (not a decision)."""
    actions = body.get("actions")
    first = _mapping(actions[0]) if isinstance(actions, list) and actions else {}
    return first.get("action_id") == CONSOLE_ACTION


def decision_from_action(body: Mapping[str, Any]) -> DecisionEvent | None:
    """The decision a ``block_actions`` payload stands for, or None if it is malformed."""
    user = _mapping(body.get("user"))
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions:
        return None
    action = _mapping(actions[0])
    name = _text(action.get("action_id")) or ""
    undo = name == UNDO_ACTION  # the Undo button of a held card: a deny of another kind
    scope = Scope.DENY if undo else scope_of_action(name)
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
        undo=undo,
    )
