"""Groups of identical requests after a crash: the sweep finishes what a crash cut short.

The state a crash between the leader's decision and its members' leaves behind is
written here as that commit wrote it (the leader decided, its task running again, the
members still pending); the daemon's sweep (`Decider.settle_coalesced`) must then decide
the members as the leader was decided, and give a card of its own to a request that
joined only after that decision.
"""

from __future__ import annotations

from signoff.runtime import audit
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import ApprovalStatus, RiskClass, Scope, TaskState
from signoff.runtime.store.port import Change
from signoff.testing import RecordingSurface
from tests.conftest import NodeFactory
from tests.factories import NoopTool, noop, start


async def test_the_sweep_decides_members_a_crash_left_pending(node_factory: NodeFactory,
                                                              store_url: str) -> None:
    """Leader approved, then a crash: the sweep approves the member asked before the
    decision (its own audit event, the same decider) and gives the one asked after it a
    card of its own, still pending."""
    clock = FakeClock()
    recording = RecordingSurface()
    node = await node_factory({"approvals": {"coalesce": True}}, database=store_url,
                              clock=clock, surfaces={"recording": recording})
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    tasks = []
    for _ in range(2):
        tasks.append(await start(node, [noop("ops", tool="notify_team")]))
        clock.advance(5)
    leader = tasks[0].approval
    assert leader is not None and leader.coalesced_into is None
    assert [m.coalesced_into for m in await node.store.coalesced(leader.id)] == [leader.id]
    assert len(recording.messages) == 1  # one card

    # What the leader's decision commits, two seconds before the third request arrives.
    decided_at = clock.now()
    clock.advance(2)
    late = await start(node, [noop("ops", tool="notify_team")])
    task = await node.store.get_task(tasks[0].id)
    assert task is not None and late.approval is not None
    decided = leader.model_copy(update={"status": ApprovalStatus.APPROVED, "scope": Scope.ONCE,
                                        "decided_by": "recording:alice",
                                        "decided_at": decided_at})
    task.approval, task.state, task.pending_action = decided, TaskState.IN_PROGRESS, None
    assert await node.store.commit(Change(at=decided_at, task=task, approval=decided,
                                          approval_expect=ApprovalStatus.PENDING))

    assert await node.decider.settle_coalesced() == 2
    member = await node.store.get_approval(tasks[1].approval.id)  # type: ignore[union-attr]
    assert member is not None and member.status is ApprovalStatus.APPROVED
    assert member.decided_by == "recording:alice"
    after = await node.store.get_task(tasks[1].id)
    assert after is not None and after.state is not TaskState.WAITING_APPROVAL
    own = await node.store.get_approval(late.approval.id)
    assert own is not None and own.status is ApprovalStatus.PENDING
    assert own.coalesced_into is None
    await node.flow.dispatcher.run_once()
    assert sorted(m.card.approval_id for m in recording.messages.values()) == sorted(
        [leader.id, own.id])
    events = await node.store.audit_chain(after=0, limit=100)
    assert [(e.approval_id, e.actor) for e in events if e.kind == "decision"] == [
        (member.id, "recording:alice")]
    assert (await audit.verify(node.store)).ok
    assert await node.decider.settle_coalesced() == 0  # nothing left to do


async def test_a_group_expires_together_with_its_card(node_factory: NodeFactory) -> None:
    """A request joining a card expires no later than it: when the card times out, every
    request behind it is denied "approval timed out", and the card counts them all."""
    clock = FakeClock()
    recording = RecordingSurface()
    node = await node_factory(clock=clock, surfaces={"recording": recording})
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    first = await start(node, [noop("ops", tool="notify_team")])
    clock.advance(600)  # ten minutes later an identical request joins the card
    second = await start(node, [noop("ops", tool="notify_team")])
    assert first.approval is not None and second.approval is not None
    assert second.approval.coalesced_into == first.approval.id
    assert second.approval.expires_at == first.approval.expires_at
    clock.advance(node.engine.config.approval_timeout.total_seconds() - 600)
    expired = await node.decider.expire_due()
    assert sorted(t.id for t in expired) == sorted([first.id, second.id])
    for task in (first, second):
        after = await node.store.get_task(task.id)
        assert after is not None and after.result is not None
        assert after.result["reason"] == "approval timed out"
    await node.flow.dispatcher.run_once()
    (message,) = recording.messages.values()
    assert message.card.status == "expired" and message.card.identical == 2


async def test_a_member_grouped_before_content_counted_never_follows(
        node_factory: NodeFactory) -> None:
    """A request grouped under a card that showed other content (a group stored before
    content was part of the key) is not decided by that card's answer: it stays pending
    and the sweep gives it a card of its own."""
    recording = RecordingSurface()
    node = await node_factory({"approvals": {"coalesce": True}},
                              surfaces={"recording": recording})
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    shown = await start(node, [noop("ops", tool="notify_team", text="all good")])
    other = await start(node, [noop("ops", tool="notify_team", text="drop the table")])
    assert shown.approval is not None and other.approval is not None
    assert other.approval.coalesced_into is None  # different content: a card of its own
    grouped = other.approval.model_copy(update={"coalesce_key": shown.approval.coalesce_key,
                                                "coalesced_into": shown.approval.id})
    assert await node.store.commit(Change(at=grouped.requested_at, approval=grouped,
                                          approval_expect=ApprovalStatus.PENDING))
    decided = await node.decider.decide(shown.approval.id, Scope.ONCE, "recording:alice")
    assert decided.accepted
    member = await node.store.get_approval(other.approval.id)
    assert member is not None and member.status is ApprovalStatus.PENDING
    await node.decider.settle_coalesced()
    member = await node.store.get_approval(other.approval.id)
    assert member is not None and member.status is ApprovalStatus.PENDING
    assert member.coalesced_into is None


async def test_a_member_never_takes_an_approval_of_edited_args(
        node_factory: NodeFactory) -> None:
    """A request that joined a card in the moment between its edit check and the edited
    approval's commit asks for args the person changed: it is not approved with the
    card (it would run its own, unedited args), it gets a card of its own."""
    clock = FakeClock()
    recording = RecordingSurface()
    node = await node_factory({"approvals": {"coalesce": True}}, clock=clock,
                              surfaces={"recording": recording})
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    first = await start(node, [noop("ops", tool="notify_team", text="pay 100")])
    clock.advance(1)
    second = await start(node, [noop("ops", tool="notify_team", text="pay 100")])
    leader, member = first.approval, second.approval
    assert leader is not None and member is not None and member.coalesced_into == leader.id

    # What an approval with edited args commits (the member already pending behind it).
    decided_at = clock.now()
    edited = leader.action.model_copy(update={"args": {"target": "ops", "text": "pay 1"}})
    decided = leader.model_copy(update={
        "status": ApprovalStatus.APPROVED, "scope": Scope.ONCE, "decided_by": "recording:alice",
        "decided_at": decided_at, "original_action": leader.action, "action": edited})
    task = await node.store.get_task(first.id)
    assert task is not None
    task.approval, task.state, task.pending_action = decided, TaskState.IN_PROGRESS, None
    assert await node.store.commit(Change(at=decided_at, task=task, approval=decided,
                                          approval_expect=ApprovalStatus.PENDING))

    await node.decider.settle_coalesced()
    own = await node.store.get_approval(member.id)
    assert own is not None and own.status is ApprovalStatus.PENDING
    assert own.coalesced_into is None and own.action.args["text"] == "pay 100"
    events = await node.store.audit_chain(after=0, limit=100)
    assert [e for e in events if e.kind == "decision" and e.approval_id == member.id] == []
