"""The audit hash chain on its own (seal, check, verify) and the events a node writes.

Tampering with a real database, and the CLI, are in tests/integration/runtime/test_audit_tamper.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from signoff.runtime import audit
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import AuditEvent, RiskClass, Scope
from signoff.runtime.signing import PublicKey
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import Change
from tests.conftest import NodeFactory
from tests.factories import NoopTool, answer, audit_log, noop, start

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def chain(n: int) -> list[AuditEvent]:
    """n sealed events, linked from the genesis hash."""
    out, prev = [], audit.GENESIS
    for i in range(1, n + 1):
        event = audit.seal(AuditEvent(kind="decision", decision="approve", actor=f"slack:U{i}",
                                      tool="send_email", targets=["john@example.com"],
                                      at=AT + timedelta(seconds=i)), event_id=i, prev_hash=prev)
        out.append(event)
        prev = event.hash
    return out


class ListAuditStore:
    """The TaskStore methods `verify` reads, over a plain list (a test double of the port)."""

    def __init__(self, events: list[AuditEvent], head: tuple[int, str] | None = None) -> None:
        self.events = events
        self.head = head or ((len(events), events[-1].hash) if events else (0, audit.GENESIS))

    async def audit_chain(self, *, after: int = 0, limit: int = 10_000) -> list[AuditEvent]:
        """Events with an id above ``after``, in list order."""
        return [e for e in self.events if e.id > after][:limit]

    async def audit_head(self) -> tuple[int, str]:
        """The stored head record."""
        return self.head

    async def signing_keys(self) -> list[PublicKey]:
        """No keys listed: these chains are unsigned."""
        return []


def test_sealing_links_each_event_to_the_one_before() -> None:
    """Each event stores the previous hash; the first one follows the genesis hash."""
    events = chain(3)
    assert events[0].prev_hash == audit.GENESIS
    assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
    assert all(len(e.hash) == 64 for e in events)


@pytest.mark.parametrize("field", ["at", "task_id", "approval_id", "kind", "decision", "scope",
                                   "actor", "tool", "targets", "risk", "fingerprint", "reason",
                                   "channel", "latency_ms", "id", "prev_hash"])
def test_the_hash_covers_every_field(field: str) -> None:
    """Changing any one field of a sealed event makes it fail its check."""
    [event] = chain(1)
    changed = {"at": AT, "targets": ["mary@example.com"], "latency_ms": 1.5, "id": 2,
               "prev_hash": "f" * 64}.get(field, "tampered")
    bad = event.model_copy(update={field: changed})
    assert audit.check_event(event, expected_id=1, prev_hash=audit.GENESIS) is None
    expected_id = 2 if field == "id" else 1
    assert audit.check_event(bad, expected_id=expected_id, prev_hash=audit.GENESIS) is not None


async def test_an_intact_chain_verifies_with_its_count_and_head() -> None:
    """verify() walks every batch and reports (count, head)."""
    events = chain(25)
    result = await audit.verify(ListAuditStore(events), batch=7)
    assert (result.ok, result.count, result.head) == (True, 25, events[-1].hash)


async def test_an_empty_log_verifies() -> None:
    """No events: ok, count 0, head is the genesis hash."""
    result = await audit.verify(ListAuditStore([]))
    assert (result.ok, result.count, result.head) == (True, 0, audit.GENESIS)


async def test_an_altered_event_is_named() -> None:
    """Editing event 4's reason: verify fails at event 4."""
    events = chain(6)
    events[3] = events[3].model_copy(update={"reason": "nothing to see"})
    result = await audit.verify(ListAuditStore(events))
    assert not result.ok and result.bad_event == 4 and "altered" in (result.problem or "")


async def test_a_resealed_edit_breaks_the_link_to_the_next_event() -> None:
    """An edit with a recomputed hash is caught by the next event's prev_hash."""
    events = chain(6)
    events[3] = audit.seal(events[3].model_copy(update={"actor": "slack:EVIL"}), event_id=4,
                           prev_hash=events[2].hash)
    result = await audit.verify(ListAuditStore(events))
    assert not result.ok and result.bad_event == 5 and "chain broken" in (result.problem or "")


async def test_a_missing_event_is_named() -> None:
    """Dropping event 3: verify says event 3 is missing."""
    events = chain(6)
    del events[2]
    result = await audit.verify(ListAuditStore(events, head=(6, chain(6)[-1].hash)))
    assert not result.ok and "event 3 is missing" in (result.problem or "")


async def test_a_cut_tail_is_caught_by_the_head_record() -> None:
    """Dropping the last two events: the head record still says 6."""
    full = chain(6)
    result = await audit.verify(ListAuditStore(full[:4], head=(6, full[-1].hash)))
    assert not result.ok and result.bad_event == 5
    assert "head record says 6" in (result.problem or "")


async def test_a_cut_tail_with_a_rewritten_head_is_caught_by_expect_head() -> None:
    """If the head record was rewritten too, a pinned --expect-head still catches it."""
    full = chain(6)
    cut = ListAuditStore(full[:4])  # head record consistent with the cut log
    assert (await audit.verify(cut)).ok
    result = await audit.verify(cut, expect_head=(6, full[-1].hash))
    assert not result.ok and "tail was cut" in (result.problem or "")


async def test_expect_head_must_match_the_event_at_that_count() -> None:
    """A pinned head whose hash differs from event N fails at N; a right pin passes."""
    events = chain(6)
    assert (await audit.verify(ListAuditStore(events), expect_head=(4, events[3].hash))).ok
    result = await audit.verify(ListAuditStore(events), expect_head=(4, "0" * 64))
    assert not result.ok and result.bad_event == 4


# --- what a node writes ---------------------------------------------------------------------


async def test_a_decision_event_says_who_what_decision_scope_channel_and_latency(
        node_factory: NodeFactory) -> None:
    """A human decision is one event with the actor, the action, the scope and the latency."""
    clock = FakeClock()
    node = await node_factory(clock=clock, store=MemTaskStore())
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    task = await start(node, [noop("x", tool="notify_team")])
    clock.advance(90)
    await answer(node, task.id, Scope.SESSION)
    asked, decided = await audit_log(node)
    assert (asked.kind, asked.decision, asked.approval_id) == ("evaluation", "ASK_USER",
                                                               task.approval and task.approval.id)
    assert decided.kind == "decision" and decided.decision == "approve"
    assert (decided.actor, decided.scope, decided.channel) == ("recording:alice", "session",
                                                               "recording")
    assert (decided.tool, decided.targets, decided.risk) == ("notify_team", ["x"], "SEND")
    assert decided.fingerprint == (task.pending_action and task.pending_action.fingerprint)
    assert decided.latency_ms == pytest.approx(90_000)
    assert decided.task_id == task.id and decided.approval_id == asked.approval_id


async def test_audit_event_times_come_from_the_node_clock(node_factory: NodeFactory) -> None:
    """Events are stamped with the node's Clock (DESIGN: time comes from a Clock), like latency."""
    clock = FakeClock()
    node = await node_factory(clock=clock, store=MemTaskStore())
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    task = await start(node, [noop("x", tool="notify_team")])
    clock.advance(90)
    await answer(node, task.id, Scope.ONCE)
    asked, decided = await audit_log(node)
    assert asked.at == clock.now() - timedelta(seconds=90)
    assert decided.at == clock.now()


async def test_an_audit_only_change_appends_to_the_same_chain(node_factory: NodeFactory) -> None:
    """Events committed on their own and with state changes form one verifiable chain."""
    node = await node_factory(store=MemTaskStore())
    for i in range(3):
        assert await node.store.commit(Change(at=node.clock.now(), audit=[AuditEvent(kind="note", reason=str(i))]))
    events = await audit_log(node)
    assert [e.id for e in events] == [1, 2, 3]
    result = await audit.verify(node.store)
    assert result.ok and (result.count, result.head) == await node.store.audit_head()


async def test_audit_events_can_be_listed_per_task(node_factory: NodeFactory) -> None:
    """audit_events(task_id=…) returns only that task's events, in chain order."""
    node = await node_factory(store=MemTaskStore())
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    one = await start(node, [noop("x", tool="notify_team")])
    two = await start(node, [noop("y", tool="notify_team")])
    await answer(node, one.id, Scope.DENY)
    page = await node.store.audit_events(task_id=one.id)
    assert [e.task_id for e in page.items] == [one.id, one.id]  # type: ignore[attr-defined]
    assert two.id not in {e.task_id for e in page.items}  # type: ignore[attr-defined]
