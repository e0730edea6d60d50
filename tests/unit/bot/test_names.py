"""People by name: `[[people]]` first, then learned chat names, in a bounded TTL cache."""

from __future__ import annotations

from datetime import timedelta

import pytest

from signoff.bot.names import NAME_LIMIT, Names, TtlCache
from signoff.runtime.clock import FakeClock
from signoff.runtime.people import People


def test_people_names_win_then_learned_names_then_the_key() -> None:
    """A listed account shows its person; a learned one its chat name; others the key."""
    names = Names(FakeClock(), People.of([("Alice", ["slack:U1"])]))
    names.learn("slack:U1", "alice.l")
    names.learn("telegram:42", "Bob")
    assert [names.name(a) for a in ("slack:U1", "telegram:42", "slack:U9")] == [
        "Alice", "Bob", "slack:U9"]
    assert names.names(["slack:U1", "slack:U1", "telegram:42"]) == ["Alice", "Bob"]


def test_learned_names_lapse_after_the_ttl() -> None:
    """A learned name is shown for a day on the Clock, then the key again."""
    clock = FakeClock()
    names = Names(clock, ttl=timedelta(days=1))
    names.learn("slack:U2", "carol")
    clock.advance(86_399)
    assert names.name("slack:U2") == "carol"
    clock.advance(2)
    assert names.name("slack:U2") == "slack:U2"


def test_the_cache_is_bounded() -> None:
    """A flood of new accounts keeps at most `size` names, dropping the oldest."""
    cache: TtlCache[str] = TtlCache(FakeClock(), size=3)
    for n in range(10):
        cache.put(f"k{n}", f"v{n}")
    assert len(cache) == 3
    assert cache.get("k0") is None and cache.get("k9") == "v9"
    with pytest.raises(ValueError):
        TtlCache(FakeClock(), size=0)


def test_a_learned_name_is_shown_as_text_and_short() -> None:
    """A chat name is chosen by its owner: folded to one line, invisible characters made
    visible, at most NAME_LIMIT characters; an empty one is not learned."""
    names = Names(FakeClock())
    names.learn("telegram:7", "Eve\u202e\n" + "x" * 200)
    shown = names.name("telegram:7")
    assert "\n" not in shown and "\u202e" not in shown and len(shown) <= NAME_LIMIT
    names.learn("telegram:8", "   ")
    assert names.name("telegram:8") == "telegram:8"
