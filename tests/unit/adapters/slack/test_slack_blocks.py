"""The Block Kit rendering of approval cards (signoff/adapters/slack/blocks.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from signoff.adapters.slack.blocks import (
    MAX_BLOCKS,
    MAX_HEADER,
    MAX_TEXT,
    card_blocks,
    card_text,
    scope_of_action,
)
from signoff.bot.cards import CUT_TEXT
from signoff.runtime.models import ALL_SCOPES, Scope
from signoff.testing import BUTTON_LABELS, sample_card
from tests.fakes.slack_api import message_text


def buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def by_label(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {b["text"]["text"]: b for b in buttons(blocks)}


def all_texts(value: object) -> list[str]:
    """Every ``text`` string anywhere in a block structure."""
    if isinstance(value, dict):
        found = [value["text"]] if isinstance(value.get("text"), str) else []
        return found + [t for v in value.values() for t in all_texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in all_texts(v)]
    return []


def test_open_card_has_the_four_buttons_in_order_with_ids_and_values() -> None:
    """Buttons follow card.allowed, are labelled Once/Session/Always/Deny and carry the id."""
    blocks = card_blocks(sample_card())
    found = buttons(blocks)
    assert [b["text"]["text"] for b in found] == [BUTTON_LABELS[s] for s in ALL_SCOPES]
    assert [b["action_id"] for b in found] == [f"signoff_{s.value}" for s in ALL_SCOPES]
    assert {b["value"] for b in found} == {"ap7Q2xK9"}
    assert [scope_of_action(b["action_id"]) for b in found] == list(ALL_SCOPES)


def test_only_allowed_buttons_in_the_given_order() -> None:
    """A card offering Deny and Once shows exactly those, in that order."""
    blocks = card_blocks(sample_card(allowed=(Scope.DENY, Scope.ONCE)))
    assert [b["text"]["text"] for b in buttons(blocks)] == ["Deny", "Once"]


def test_deny_is_danger_and_once_is_primary() -> None:
    """Deny is styled danger, Once primary, the others plain."""
    styles = {label: b.get("style") for label, b in by_label(card_blocks(sample_card())).items()}
    assert styles == {"Once": "primary", "Session": None, "Always": None, "Deny": "danger"}


def test_always_asks_for_confirmation_on_a_send_action() -> None:
    """On a SEND card only Always has a confirm dialog."""
    found = by_label(card_blocks(sample_card()))
    assert [label for label, b in found.items() if "confirm" in b] == ["Always"]
    confirm = found["Always"]["confirm"]
    assert set(confirm) >= {"title", "text", "confirm", "deny"}


def test_destructive_confirms_every_approving_button_but_not_deny() -> None:
    """On a DESTRUCTIVE card Once, Session and Always confirm; Deny never does."""
    card = sample_card(risk="DESTRUCTIVE", tool="delete_file", title="Delete file notes.txt",
                       targets=("notes.txt",))
    found = by_label(card_blocks(card))
    assert [label for label, b in found.items() if "confirm" in b] == ["Once", "Session", "Always"]
    assert found["Once"]["confirm"]["style"] == "danger"


def test_open_card_shows_risk_action_targets_details_task_step_and_expiry() -> None:
    """Header with risk; action and targets; content details; task, step and expiry."""
    blocks = card_blocks(sample_card(schedule="nightly-report"))
    assert blocks[0]["type"] == "header" and "SEND" in blocks[0]["text"]["text"]
    text = message_text({"blocks": blocks})
    for part in ("Send email to john@example.com", "`john@example.com`", "Hi John",
                 "t-contract", "Step 2/2", "Expires", "Schedule: nightly-report"):
        assert part in text


def test_decided_card_has_no_actions_and_shows_the_outcome() -> None:
    """Once decided: the same text, no actions block, the outcome with a real mention."""
    card = replace(sample_card(), status="approved", decided_by="slack:U0ALICE",
                   decided_at=datetime.now(UTC),
                   outcome="Approved for this session by slack:U0ALICE at 14:03 UTC")
    blocks = card_blocks(card)
    assert all(b["type"] != "actions" for b in blocks)
    text = message_text({"blocks": blocks})
    assert "Approved for this session by <@U0ALICE> at 14:03 UTC" in text
    assert "Send email to john@example.com" in text
    assert "Expires" not in text
    assert "Approved for this session" in card_text(card)


def test_mentions_of_slack_users_are_real_mentions() -> None:
    """slack:U… mentions become <@U…>; people on other surfaces are left out."""
    card = sample_card(mentions=("slack:U0BOB", "telegram:42"))
    text = message_text({"blocks": card_blocks(card)})
    assert "<@U0BOB>" in text
    assert "42" not in text.split("|")[1]
    assert card_text(card).startswith("<@U0BOB> ")


def test_user_text_is_escaped() -> None:
    """A title or detail cannot smuggle <!channel> or links into the card."""
    card = sample_card(title="Post <!channel> & <http://evil|x>",
                       details=(("text", "<@U0BOSS> pay now"),))
    texts = " ".join(all_texts(card_blocks(card)))
    assert "<!channel>" not in texts and "<@U0BOSS>" not in texts
    assert "&lt;!channel&gt; &amp;" in texts
    assert "<!channel>" not in card_text(card)


def test_huge_card_stays_within_slack_limits() -> None:
    """Long goals, details and many targets are clipped to Slack's per-field limits; a
    card that cannot show what it approves whole offers no decision there."""
    card = sample_card(goal="g" * 10_000, title="t" * 5_000,
                       targets=tuple(f"user{i}@example.com" for i in range(500)),
                       details=tuple((f"k{i}", "v" * 500) for i in range(50)),
                       schedule="s" * 4000, note="n" * 4000)
    blocks = card_blocks(card)
    assert len(blocks) <= MAX_BLOCKS
    assert len(blocks[0]["text"]["text"]) <= MAX_HEADER
    assert all(len(t) <= MAX_TEXT for t in all_texts(blocks))
    assert len(card_text(card)) <= MAX_TEXT
    assert buttons(blocks) == []
    assert CUT_TEXT in all_texts(blocks)


def test_only_well_formed_slack_ids_become_mentions() -> None:
    """A crafted actor key cannot inject mrkdwn through a mention."""
    card = sample_card(mentions=("slack:U1>|<!channel", "slack:U0BOB"))
    texts = " ".join(all_texts(card_blocks(card)))
    assert "<!channel" not in texts
    assert "<@U0BOB>" in texts


def test_console_link_is_in_the_context() -> None:
    """A card with a console URL links to it."""
    card = sample_card(console_url="https://signoff.example.com/tasks/t-contract")
    assert "<https://signoff.example.com/tasks/t-contract|Open in console>" in " ".join(
        all_texts(card_blocks(card)))
