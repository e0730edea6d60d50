"""Step-up cards as Slack blocks, Telegram keyboards and mail: one link to the console page
of the request, no decision button; without a public URL, no button at all but the words."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from signoff.adapters.email.messages import card_message
from signoff.adapters.slack.blocks import CONSOLE_ACTION, card_blocks
from signoff.adapters.slack.listeners import decision_from_action, is_console_link
from signoff.adapters.telegram.keyboards import card_html, card_keyboard, console_button
from signoff.runtime.models import Scope
from signoff.testing import sample_card
from tests.fakes.slack_api import block_actions_payload, message_text

LINK = "https://signoff.example.com/console/cards/ap7Q2xK9"


def _buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_slack_step_up_card_has_only_a_url_button_and_its_click_decides_nothing() -> None:
    """One URL button; Slack's report of its click is recognised and is no decision."""
    card = replace(sample_card(risk="DESTRUCTIVE"), step_up=True, confirm_url=LINK)
    blocks = card_blocks(card)
    [button] = _buttons(blocks)
    assert (button["action_id"], button["url"]) == (CONSOLE_ACTION, LINK)
    assert "Decided in the console only" in message_text({"blocks": blocks})
    click = block_actions_payload(channel="C1", message_ts="1.2", action_id=CONSOLE_ACTION,
                                  value=card.approval_id)
    assert is_console_link(click) and decision_from_action(click) is None
    assert not _buttons(card_blocks(replace(card, confirm_url=None)))


def test_telegram_step_up_card_has_only_a_url_button() -> None:
    """No callback buttons; the URL button (the platform builds it) and the words."""
    card = replace(sample_card(risk="DESTRUCTIVE"), step_up=True, confirm_url=LINK)
    assert card_keyboard(card) == []
    assert console_button(card) == ("Open in console to decide", LINK)
    assert "Decided in the console only" in card_html(card)
    assert console_button(replace(card, confirm_url=None)) is None
    assert console_button(replace(card, status="approved")) is None


def test_email_step_up_card_has_no_decision_links_only_the_console_page() -> None:
    """A mailed step-up card links to its console page instead of one link per decision."""
    card = replace(sample_card(risk="DESTRUCTIVE"), step_up=True, confirm_url=LINK)
    links = {Scope.ONCE: "https://signoff.example.com/email/confirm?t=abc"}
    mail = card_message(card, sender="signoff@example.com", to="alice@example.com",
                        links=links)
    body = mail.get_body(("plain",))
    assert body is not None
    text = body.get_content()
    assert LINK in text and "/email/confirm" not in text
    html_part = mail.get_body(("html",))
    assert html_part is not None and "/email/confirm" not in html_part.get_content()


def test_passkey_step_up_cards_say_a_passkey_confirms_in_the_console() -> None:
    """Under passkey step-up, Slack and Telegram cards still offer no decision button and
    say that a passkey confirms the request in the console."""
    card = replace(sample_card(risk="DESTRUCTIVE"), step_up=True, passkey=True,
                   confirm_url=LINK)
    blocks = card_blocks(card)
    assert [b["action_id"] for b in _buttons(blocks)] == [CONSOLE_ACTION]
    assert "Confirmed with a passkey in the console only" in message_text({"blocks": blocks})
    assert card_keyboard(card) == []
    assert "Confirmed with a passkey in the console only" in card_html(card)
