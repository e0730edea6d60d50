"""Console sessions on every store: kept until ended, shared as stored, expired ones
forgotten when a new one opens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from signoff.runtime.store.port import ConsoleSession, TaskStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def test_a_session_lives_until_it_is_ended(store: TaskStore) -> None:
    """A stored session reads back whole; ending it (twice) forgets it."""
    session = ConsoleSession("s" * 64, "admin", "k" * 32, NOW + timedelta(hours=12))
    await store.open_session(session, now=NOW)
    assert await store.console_session(session.id) == session
    assert await store.console_session("unknown") is None
    await store.end_session(session.id)
    await store.end_session(session.id)
    assert await store.console_session(session.id) is None


async def test_opening_a_session_forgets_the_expired_ones(store: TaskStore) -> None:
    """Sessions past their expiry are deleted when another opens; live ones stay."""
    old = ConsoleSession("old", "bob", "k1", NOW)
    live = ConsoleSession("live", "bob", "k1", NOW + timedelta(hours=1))
    await store.open_session(old, now=NOW - timedelta(hours=1))
    await store.open_session(live, now=NOW - timedelta(hours=1))
    await store.open_session(ConsoleSession("new", "admin", "k2", NOW + timedelta(hours=12)),
                             now=NOW)
    assert await store.console_session("old") is None
    assert await store.console_session("live") == live
