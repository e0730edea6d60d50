"""Undelivered-card marks on every store: the first mark stays, oldest first, forgotten
one by one, and gone after a reset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from signoff.runtime.store.port import TaskStore, UndeliveredCard

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def test_marks_keep_the_first_and_list_oldest_first(store: TaskStore) -> None:
    """A second mark of one card keeps the first error and time; the list is by time."""
    late = UndeliveredCard("a-2", "telegram", "bot was blocked", NOW + timedelta(minutes=1))
    await store.mark_undelivered(late)
    await store.mark_undelivered(UndeliveredCard("a-1", "slack", "channel_not_found", NOW))
    await store.mark_undelivered(UndeliveredCard("a-1", "slack", "again", NOW + timedelta(1)))
    assert await store.undelivered() == [
        UndeliveredCard("a-1", "slack", "channel_not_found", NOW), late]
    assert await store.undelivered(limit=1) == [
        UndeliveredCard("a-1", "slack", "channel_not_found", NOW)]


async def test_forget_drops_one_mark_and_reset_drops_all(store: TaskStore) -> None:
    """Forgetting is per approval and surface; a reset forgets the rest."""
    await store.mark_undelivered(UndeliveredCard("a-1", "slack", "x", NOW))
    await store.mark_undelivered(UndeliveredCard("a-1", "telegram", "y", NOW))
    await store.forget_undelivered("a-1", "slack")
    await store.forget_undelivered("a-9", "slack")  # unknown: nothing happens
    assert [(c.approval_id, c.surface) for c in await store.undelivered()] == [
        ("a-1", "telegram")]
    counts = await store.reset()
    assert counts["undelivered cards"] == 1
    assert await store.undelivered() == []
