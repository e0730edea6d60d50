"""Discord cards as pure data: buttons and their custom_ids, what a reader sees of agent
text, and who may be pinged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from signoff.adapters.discord.components import (
    MAX_CUSTOM_ID,
    card_message,
    decode_custom_id,
    encode_custom_id,
    escape,
    is_card_of,
    new_card,
    notice,
)
from signoff.runtime.models import Scope
from signoff.testing import sample_card

LINK = "https://signoff.example.com/console/cards/ap7Q2xK9?x=a_b"


def buttons(card: object) -> list[dict[str, object]]:
    return [b for row in card_message(card)["components"]  # type: ignore[arg-type]
            for b in row["components"]]


def test_each_allowed_decision_is_a_button_whose_id_decodes_back() -> None:
    """Once / Session / Always / Deny carry the approval id and the decision."""
    card = sample_card()
    found = [(b["label"], decode_custom_id(b["custom_id"])) for b in buttons(card)]
    assert found == [("Once", ("ap7Q2xK9", Scope.ONCE, False)),
                     ("Session", ("ap7Q2xK9", Scope.SESSION, False)),
                     ("Always", ("ap7Q2xK9", Scope.ALWAYS, False)),
                     ("Deny", ("ap7Q2xK9", Scope.DENY, False))]


def test_a_custom_id_that_is_not_ours_decodes_to_nothing() -> None:
    """Foreign, truncated or oversized ids decide nothing."""
    for custom_id in ("x:ap:o", "so:ap:z", "so::o", "so:ap", None, "so:" + "a" * 100 + ":o"):
        assert decode_custom_id(custom_id) is None, custom_id


def test_an_approval_id_too_long_for_a_custom_id_is_refused() -> None:
    """Discord allows 100 characters: a longer id is a ValueError, never a cut id."""
    assert len(encode_custom_id("a" * (MAX_CUSTOM_ID - 5), "o")) == MAX_CUSTOM_ID
    with pytest.raises(ValueError, match="at most 100"):
        card_message(sample_card(approval_id="a" * MAX_CUSTOM_ID))


def test_a_decided_card_has_no_buttons_and_a_held_one_only_undo() -> None:
    """Decided: the outcome, no buttons. Held: one Undo button."""
    card = sample_card()
    assert buttons(replace(card, status="denied", outcome="Denied")) == []
    [undo] = buttons(replace(card, status="held", outcome="Held"))
    assert undo["label"] == "Undo" and decode_custom_id(undo["custom_id"]) == (
        "ap7Q2xK9", Scope.DENY, True)


def test_urls_stay_whole_while_markdown_around_them_is_escaped() -> None:
    """A console link keeps its underscores; the words around it are escaped."""
    assert escape(f"Confirm *now*: {LINK}") == f"Confirm \\*now\\*: {LINK}"
    assert escape("<@1> @here") == "\\<@1\\> @\u200bhere"


def test_a_notice_pings_only_the_discord_people_it_names() -> None:
    """Discord approvers become mentions allowed to ping; others are written as keys."""
    body = notice("Waiting for <@9>", ["discord:42", "slack:U1", "discord:42"])
    assert body["content"] == "Waiting for \\<@9\\> <@42> slack:U1 <@42>"
    assert body["allowed_mentions"] == {"parse": [], "users": ["42"]}


def test_a_posted_card_carries_a_short_enforced_nonce_and_is_recognised() -> None:
    """The nonce fits Discord's 25 characters; a message with the card's buttons, by our
    bot and not a reply, is a copy of it."""
    body = new_card(sample_card())
    assert len(body["nonce"]) <= 25 and body["enforce_nonce"] is True
    message = {"id": "1", "author": {"id": "7"}, "components": body["components"]}
    assert is_card_of(message, "ap7Q2xK9", "7")
    assert not is_card_of(message, "ap7Q2xK9", "8")
    assert not is_card_of(message, "other", "7")
    assert not is_card_of({**message, "message_reference": {"message_id": "0"}}, "ap7Q2xK9", "7")
