"""Telegram card rendering: HTML text, inline keyboards and callback data (pure functions)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from signoff.adapters.telegram.keyboards import (
    MAX_CALLBACK_BYTES,
    MAX_TEXT,
    card_html,
    card_keyboard,
    decode_callback,
    encode_callback,
)
from signoff.bot.ports import ApprovalCard
from signoff.runtime.models import ALL_SCOPES, Scope
from signoff.testing import BUTTON_LABELS, sample_card
from tests.fakes.telegram_api import visible_text


def decided(**changes: object) -> ApprovalCard:
    """The sample card after a session approval."""
    return sample_card(status="approved", decided_by="telegram:42",
                       decided_at=datetime.now(UTC),
                       outcome="Approved for this session by telegram:42 at 14:03 UTC",
                       **changes)


@pytest.mark.parametrize("scope", ALL_SCOPES)
def test_callback_data_round_trips(scope: Scope) -> None:
    """Every decision code decodes back to the approval id and scope it was built from."""
    data = encode_callback("ap7Q2xK9", scope)
    assert data.startswith("so:ap7Q2xK9:")
    assert decode_callback(data) == ("ap7Q2xK9", scope)


def test_callback_data_fits_for_a_uuid_approval_id() -> None:
    """A 36-character id leaves room: the data stays well under 64 bytes."""
    data = encode_callback("5f0c6a3e-6b1d-4c1e-9a53-0c2b8f1d7e44", Scope.SESSION)
    assert len(data.encode()) <= MAX_CALLBACK_BYTES


@pytest.mark.parametrize("approval_id", ["x" * 60, "é" * 30])
def test_callback_data_over_64_bytes_is_refused(approval_id: str) -> None:
    """The byte length (not the character count) is checked, and too long raises."""
    with pytest.raises(ValueError, match="64"):
        encode_callback(approval_id, Scope.ONCE)


@pytest.mark.parametrize("data", [None, "", "so", "so:", "so::o", "so:ab12:z", "so:ab12",
                                  "xx:ab12:o", "so:ab12:", "so:" + "a" * 70 + ":o"])
def test_malformed_callback_data_decodes_to_none(data: str | None) -> None:
    """Data that is not ours (or is cut, or too long) is not a decision."""
    assert decode_callback(data) is None


def test_keyboard_has_only_the_allowed_scopes_in_order() -> None:
    """Only the offered decisions get buttons, in the card's order, with the shared labels."""
    card = sample_card(allowed=(Scope.ONCE, Scope.DENY))
    rows = card_keyboard(card)
    assert [label for row in rows for label, _ in row] == ["Once", "Deny"]
    assert [decode_callback(data) for row in rows for _, data in row] == [
        ("ap7Q2xK9", Scope.ONCE), ("ap7Q2xK9", Scope.DENY)]
    assert {label for row in card_keyboard(sample_card()) for label, _ in row} == set(
        BUTTON_LABELS.values())


def test_decided_card_has_no_keyboard_and_keeps_action_and_outcome() -> None:
    """Once decided: no buttons, the action text and targets stay, the outcome is added."""
    card = decided()
    assert card_keyboard(card) == []
    text = visible_text(card_html(card), "HTML")
    assert "Send email to john@example.com" in text
    assert "john@example.com" in text
    assert "Approved for this session by telegram:42" in text
    assert "Approval needed" not in text


def test_card_shows_risk_targets_details_task_step_and_expiry() -> None:
    """The card names the risk, targets, shortened content, task, step n/m and expiry."""
    card = sample_card(schedule="weekly-report")
    text = visible_text(card_html(card), "HTML")
    for part in ("SEND", "john@example.com", "Hi John", "t-contract", "step 2/2",
                 "weekly-report", card.expires_at.strftime("%H:%M UTC"), "ap7Q2xK9",
                 "send the weekly report to John"):
        assert part in text, part


def test_everything_from_the_task_is_html_escaped() -> None:
    """A <script> in the goal, targets or content is shown as text, never as markup."""
    card = sample_card(goal="<script>alert(1)</script> & more",
                       targets=("<b>evil@example.com</b>",),
                       title="Send email to <i>x</i>", details=(("body", "</pre>"),),
                       schedule='"><a href="x">', note="<tg-spoiler>")
    rendered = card_html(card)
    assert "<script>" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in rendered
    text = visible_text(rendered, "HTML")  # raises like Telegram on a bad tag
    assert "<script>alert(1)</script> & more" in text
    assert "<b>evil@example.com</b>" in text


def test_telegram_mentions_become_user_links() -> None:
    """Escalation mentions of Telegram users link to them; other platforms are left out."""
    card = sample_card(mentions=("telegram:4242", "slack:U1", "telegram:not-a-number"))
    rendered = card_html(card)
    assert '<a href="tg://user?id=4242">4242</a>' in rendered
    assert "U1" not in rendered
    assert "not-a-number" not in rendered


def test_a_huge_card_still_fits_in_one_message() -> None:
    """Oversized fields are cut so the message stays under Telegram's 4096 characters."""
    card = sample_card(title="<" * 5000, goal="&" * 5000, note='"' * 5000,
                       targets=tuple(f"user{i}@example.com" for i in range(500)),
                       details=tuple(("body", "x" * 1000) for _ in range(50)))
    rendered = card_html(card)
    assert len(rendered) <= MAX_TEXT
    assert "and 497 more" in visible_text(rendered, "HTML")


def test_expired_card_has_no_buttons() -> None:
    """An expired request is closed like a decided one."""
    card = replace(sample_card(), status="expired", outcome="Expired — denied at 14:33 UTC")
    assert card_keyboard(card) == []
    assert "Expired" in visible_text(card_html(card), "HTML")
