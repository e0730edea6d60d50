"""Time-boxed grants on every backend: each stores ``expires_at`` and gives it back as it
was, so `first_valid` stops using the grant at the same instant on all of them."""

from __future__ import annotations

from datetime import timedelta

from signoff.runtime.models import Grant, RiskClass, Scope
from signoff.runtime.policy.grants import first_valid
from signoff.runtime.store.port import Change, TaskStore
from tests.integration.runtime.store.test_store import NOW


async def test_a_time_boxed_grant_lapses_on_every_store(store: TaskStore) -> None:
    """Stored with its end, listed with it, covering until then and not from then on."""
    end = NOW + timedelta(minutes=30)
    grant = Grant(id="g-1", key="k", policy_id="nightly", task_id="t-1", scope=Scope.ALWAYS,
                  tool="send_email", capability="email.send", risk=RiskClass.SEND,
                  fingerprint="f", created_at=NOW, expires_at=end)
    assert await store.commit(Change(at=NOW, grants=[grant]))
    [listed] = await store.list_grants()
    assert listed.expires_at == end
    candidates = await store.grant_candidates("k")
    assert first_valid(candidates, task_id="t-2", now=end - timedelta(seconds=1)) is not None
    assert first_valid(candidates, task_id="t-2", now=end) is None
