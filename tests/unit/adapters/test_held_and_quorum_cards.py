"""A quorum's progress and a held card's Undo, as each surface renders them."""

from __future__ import annotations

from datetime import UTC, datetime

from signoff.adapters.slack.blocks import UNDO_ACTION, card_blocks, card_text
from signoff.adapters.slack.listeners import decision_from_action
from signoff.adapters.telegram.keyboards import (
    card_html,
    card_keyboard,
    decode_callback,
    decode_undo,
)
from signoff.adapters.web.pages import CardView, hold_left
from signoff.adapters.web.pages import card_html as web_card
from signoff.runtime.models import Scope
from signoff.testing import sample_card
from tests.fakes.slack_api import block_actions_payload

UNTIL = datetime(2026, 3, 14, 9, 27, 30, tzinfo=UTC)
HELD = sample_card(status="held", outcome="Approved once by slack:U1 at 09:27 UTC — runs at "
                   "09:27:30 UTC unless undone", hold_until=UNTIL)
PARTIAL = sample_card(progress="1 of 2 approvals (slack:U1)")


def test_slack_shows_the_count_and_a_held_card_only_undo() -> None:
    """An open card under a quorum says 1 of 2; a held card has the one Undo button,
    and its click reads as an undo."""
    assert "1 of 2 approvals (slack:U1)" in str(card_blocks(PARTIAL))
    assert "1 of 2 approvals" in card_text(PARTIAL)
    buttons = [e for b in card_blocks(HELD) if b["type"] == "actions" for e in b["elements"]]
    assert [(b["action_id"], b["text"]["text"]) for b in buttons] == [(UNDO_ACTION, "Undo")]
    assert "unless undone" in str(card_blocks(HELD))
    event = decision_from_action(block_actions_payload(
        channel="C1", message_ts="1.2", action_id=UNDO_ACTION, value="ap7Q2xK9"))
    assert event is not None and event.undo and event.scope is Scope.DENY


def test_telegram_shows_the_count_and_a_held_card_only_undo() -> None:
    """The Undo button's data is ``so:<id>:u``, read back as an undo, never a scope."""
    assert "1 of 2 approvals" in card_html(PARTIAL)
    [[(label, data)]] = card_keyboard(HELD)
    assert (label, data) == ("Undo", "so:ap7Q2xK9:u")
    assert decode_undo(data) == "ap7Q2xK9" and decode_callback(data) is None
    assert decode_undo("so:ap7Q2xK9:o") is None


def test_the_console_shows_a_countdown_and_undo() -> None:
    """A held console card: the release time as a countdown and one Undo button."""
    now = datetime(2026, 3, 14, 9, 27, 5, tzinfo=UTC)
    page = web_card(CardView(HELD), csrf="x", now=now)
    assert f'data-hold="{UNTIL.isoformat()}"' in page and "runs in 25 s" in page
    assert 'value="undo"' in page and page.count("<button") == 1
    assert "1 of 2 approvals" in web_card(CardView(PARTIAL), csrf="x", now=now)
    assert hold_left(UNTIL, UNTIL) == "running now"
