"""Tests for the human duration syntax shared by config, CLI and chat messages."""

from __future__ import annotations

from datetime import timedelta

import pytest

from signoff.runtime.schedule.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1w", timedelta(weeks=1)),
        ("500ms", timedelta(milliseconds=500)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("2H", timedelta(hours=2)),
        ("90", timedelta(seconds=90)),
        ("2.5", timedelta(seconds=2.5)),
        ("0s", timedelta()),
    ],
)
def test_parse_accepts_units_and_plain_seconds(text: str, expected: timedelta) -> None:
    """Each unit, compound forms and bare numbers (seconds) parse to the right timedelta."""
    assert parse_duration(text) == expected


def test_parse_accepts_numbers() -> None:
    """An int or float from TOML means seconds."""
    assert parse_duration(45) == timedelta(seconds=45)
    assert parse_duration(0.25) == timedelta(milliseconds=250)


@pytest.mark.parametrize("text", ["abc", "", "  ", "1x", "1h x", "h", "-5", "5 minutes", "1hh"])
def test_parse_rejects_garbage_with_a_hint(text: str) -> None:
    """Anything else is a ValueError that quotes the input and shows the accepted forms."""
    with pytest.raises(ValueError, match=r"invalid duration .*use e\.g\. '30s', '15m', '2h'"):
        parse_duration(text)


def test_parse_error_message_is_exact() -> None:
    """The message reads exactly as documented."""
    with pytest.raises(ValueError) as info:
        parse_duration("abc")
    assert str(info.value) == "invalid duration 'abc' (use e.g. '30s', '15m', '2h')"


@pytest.mark.parametrize("value", [True, -1, float("nan"), float("inf")])
def test_parse_rejects_odd_numbers(value: float) -> None:
    """Booleans, negative and non-finite numbers are not durations."""
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (timedelta(), "0s"),
        (timedelta(seconds=30), "30s"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(days=8, seconds=61), "1w1d1m1s"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(seconds=2, milliseconds=500), "2s500ms"),
        (timedelta(microseconds=1500), "1.5ms"),
        (-timedelta(minutes=5), "-5m"),
    ],
)
def test_format_is_compact(td: timedelta, text: str) -> None:
    """format_duration writes the shortest unit-by-unit form."""
    assert format_duration(td) == text


@pytest.mark.parametrize(
    "td",
    [
        timedelta(seconds=1),
        timedelta(minutes=90),
        timedelta(days=3, hours=4),
        timedelta(microseconds=1500),
    ],
)
def test_format_round_trips(td: timedelta) -> None:
    """Parsing a formatted duration gives the same timedelta back."""
    assert parse_duration(format_duration(td)) == td
