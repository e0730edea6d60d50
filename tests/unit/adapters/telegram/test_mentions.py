"""Telegram users named after a message become text mentions at the right UTF-16 place."""

from __future__ import annotations

from signoff.adapters.telegram.mentions import Mention, with_mentions


def test_only_telegram_users_are_mentioned_at_their_utf16_offsets() -> None:
    """An emoji before the names counts two; a Slack member stays plain text."""
    text, mentions = with_mentions("🔔 answer:", ["slack:U1", "telegram:42"], 4096)
    assert text == "🔔 answer: slack:U1, telegram:42"
    assert mentions == [Mention(offset=21, length=11, user_id=42)]


def test_a_name_cut_off_by_the_limit_is_not_mentioned() -> None:
    """A mention never points past the end of the text that is sent."""
    text, mentions = with_mentions("x" * 10, ["telegram:42"], 15)
    assert text == "x" * 10 + " tele" and mentions == []
    assert with_mentions("hi", [], 4096) == ("hi", [])
