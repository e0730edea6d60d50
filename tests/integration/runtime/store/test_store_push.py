"""Push subscriptions on every store (memory, SQLite, PostgreSQL): kept per person, one per
browser endpoint, forgotten when removed (only one's own)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from signoff.runtime.store.port import PushSubscription, TaskStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def sub(sub_id: str, holder: str, endpoint: str, minutes: int = 0) -> PushSubscription:
    return PushSubscription(id=sub_id, holder=holder, endpoint=endpoint, p256dh="B" * 87,
                            auth="a" * 22, created_at=NOW + timedelta(minutes=minutes))


async def test_subscriptions_read_back_per_person_oldest_first(store: TaskStore) -> None:
    """Each person's subscriptions read back whole, oldest first; None lists everyone's."""
    a1 = sub("ps-1", "web:alice", "https://push.example/1")
    b1 = sub("ps-2", "web:bob", "https://push.example/2", minutes=1)
    a2 = sub("ps-3", "web:alice", "https://push.example/3", minutes=2)
    for s in (a1, b1, a2):
        assert await store.add_push_subscription(s) == s
    assert await store.push_subscriptions("web:alice") == [a1, a2]
    assert await store.push_subscriptions() == [a1, b1, a2]
    assert await store.push_subscriptions("web:nobody") == []


async def test_the_same_browser_subscribing_again_replaces_its_row(store: TaskStore) -> None:
    """A second subscription of one endpoint (another person signed in on that browser)
    replaces the first: a browser gets each notification once."""
    await store.add_push_subscription(sub("ps-1", "web:alice", "https://push.example/x"))
    again = sub("ps-2", "web:bob", "https://push.example/x", minutes=1)
    await store.add_push_subscription(again)
    assert await store.push_subscriptions() == [again]


async def test_removing_takes_only_ones_own(store: TaskStore) -> None:
    """remove with a holder leaves another person's subscription; without one it removes
    any (the push service said it is gone); a second removal finds nothing."""
    await store.add_push_subscription(sub("ps-1", "web:alice", "https://push.example/1"))
    assert await store.remove_push_subscription("ps-1", holder="web:bob") is False
    assert await store.remove_push_subscription("ps-1") is True
    assert await store.remove_push_subscription("ps-1") is False
    assert await store.push_subscriptions() == []
