"""Deciding a request: allowed scopes, who may decide, late answers, revoking grants.

Issue 3 ("Governance"): a decision is a compare-and-set on the request, offered scopes are
enforced by the server, refusals are audited, grants can be listed and revoked.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from signoff.runtime.clock import FakeClock
from signoff.runtime.models import ApprovalStatus, Grant, RiskClass, RunMode, Scope, TaskState
from signoff.runtime.policy.grants import covers
from signoff.runtime.store.memory import MemTaskStore
from tests.conftest import NodeFactory
from tests.factories import NoopTool, answer, audit_log, card_ref, delete, noop, start

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


async def _node(node_factory: NodeFactory, overrides: dict[str, Any] | None = None,
                **kwargs: Any) -> tuple[Any, NoopTool]:
    kwargs.setdefault("store", MemTaskStore())
    node = await node_factory(overrides, **kwargs)
    tool = NoopTool(name="notify_team", capability="team.notify", risk=RiskClass.SEND)
    node.registry.register(tool)
    return node, tool


async def test_a_scope_the_risk_class_does_not_offer_is_refused_and_audited(
        node_factory: NodeFactory) -> None:
    """[approvals.scopes] DESTRUCTIVE = ["once", "deny"]: only those buttons; "session" is refused."""
    node, _ = await _node(node_factory, {"approvals": {"scopes": {"DESTRUCTIVE": ["once", "deny"]}}})
    (node.work_dir / "old.txt").write_text("x")
    task = await start(node, [delete("old.txt")])
    assert task.approval is not None
    ref = card_ref(node, task.approval.id)
    assert node.surfaces["recording"].rendered(ref).buttons == ("Once", "Deny")
    result = await node.decider.decide(task.approval.id, Scope.SESSION, "web:admin")
    assert (result.accepted, result.code) == (False, "scope_not_allowed")
    stored = await node.store.get_task(task.id)
    assert stored is not None and stored.state is TaskState.WAITING_APPROVAL
    last = (await audit_log(node))[-1]
    assert (last.kind, last.actor) == ("refused", "web:admin")
    assert "session" in (last.reason or "")
    assert (node.work_dir / "old.txt").exists()


async def test_send_keeps_all_four_scopes_when_only_destructive_is_restricted(
        node_factory: NodeFactory) -> None:
    """Scopes are per risk class: restricting DESTRUCTIVE leaves SEND with the four buttons."""
    node, _ = await _node(node_factory, {"approvals": {"scopes": {"DESTRUCTIVE": ["once", "deny"]}}})
    task = await start(node, [noop("x", tool="notify_team")])
    assert task.approval is not None
    ref = card_ref(node, task.approval.id)
    assert node.surfaces["recording"].rendered(ref).buttons == ("Once", "Session", "Always",
                                                                 "Deny")


async def test_forbid_self_approval_refuses_the_submitter_but_not_another_approver(
        node_factory: NodeFactory) -> None:
    """With forbid_self_approval the person who submitted cannot approve; someone else can."""
    node, tool = await _node(node_factory, {"approvals": {"forbid_self_approval": True}},
                             approvers=("recording:alice", "recording:bob"))
    task = await start(node, [noop("x", tool="notify_team")], submitted_by="recording:alice")
    outcome, after = await answer(node, task.id, Scope.ONCE, user="alice")
    assert (outcome.accepted, outcome.code) == (False, "not_authorized")
    assert after.state is TaskState.WAITING_APPROVAL
    assert (await audit_log(node))[-1].reason == "self-approval is forbidden"
    outcome, after = await answer(node, task.id, Scope.ONCE, user="bob")
    assert outcome.accepted and after.state is TaskState.COMPLETED
    assert tool.runs == 1


async def test_someone_who_is_not_an_approver_is_refused_and_audited(
        node_factory: NodeFactory) -> None:
    """A click from a user outside the approvers list changes nothing and is audited."""
    node, tool = await _node(node_factory)
    task = await start(node, [noop("x", tool="notify_team")])
    outcome, after = await answer(node, task.id, Scope.ALWAYS, user="mallory")
    assert (outcome.accepted, outcome.code) == (False, "not_authorized")
    assert after.state is TaskState.WAITING_APPROVAL and tool.runs == 0
    assert await node.store.list_grants() == []
    last = (await audit_log(node))[-1]
    assert (last.kind, last.actor, last.channel) == ("refused", "recording:mallory", "recording")


async def test_a_late_answer_is_told_who_decided_and_when_and_is_audited(
        node_factory: NodeFactory) -> None:
    """The second answer gets "Already decided by X at T" and leaves an audit event."""
    node, tool = await _node(node_factory, clock=FakeClock(),
                             approvers=("recording:alice", "recording:bob"))
    task = await start(node, [noop("x", tool="notify_team")])
    first, _ = await answer(node, task.id, Scope.ONCE, user="alice")
    assert first.accepted
    platform = node.surfaces["recording"]
    assert task.approval is not None
    second = await platform.click(card_ref(node, task.approval.id), Scope.DENY, "bob")
    assert (second.accepted, second.code) == (False, "already_decided")
    assert second.message == "Already decided by recording:alice at 12:00 UTC"
    last = (await audit_log(node))[-1]
    assert (last.kind, last.actor) == ("refused", "recording:bob")
    assert tool.runs == 1


async def test_an_answer_after_the_timeout_is_refused_as_expired(
        node_factory: NodeFactory) -> None:
    """Once a request timed out, a click is told it expired; nothing runs."""
    clock = FakeClock()
    node, tool = await _node(node_factory, clock=clock)
    task = await start(node, [noop("x", tool="notify_team")])
    clock.advance(node.engine.config.approval_timeout)
    [expired] = await node.decider.expire_due()
    assert expired.approval is not None and expired.approval.status is ApprovalStatus.EXPIRED
    assert task.approval is not None
    outcome = await node.surfaces["recording"].click(card_ref(node, task.approval.id),
                                                      Scope.ONCE, "alice")
    assert (outcome.accepted, outcome.code) == (False, "expired")
    assert tool.runs == 0


async def test_a_request_does_not_expire_before_its_time(node_factory: NodeFactory) -> None:
    """One second before expires_at nothing is expired."""
    clock = FakeClock()
    node, _ = await _node(node_factory, clock=clock)
    await start(node, [noop("x", tool="notify_team")])
    clock.advance(node.engine.config.approval_timeout.total_seconds() - 1)
    assert await node.decider.expire_due() == []


async def test_an_answer_to_an_unknown_request_is_refused_and_audited(
        node_factory: NodeFactory) -> None:
    """Deciding a request id that does not exist is refused and audited."""
    node, _ = await _node(node_factory)
    result = await node.decider.decide("a-doesnotexist", Scope.ONCE, "web:admin")
    assert (result.accepted, result.code) == (False, "unknown")
    [event] = await audit_log(node)
    assert (event.kind, event.approval_id, event.actor) == ("refused", "a-doesnotexist",
                                                            "web:admin")


async def test_a_revoked_always_grant_no_longer_allows_the_action(
        node_factory: NodeFactory) -> None:
    """Revoking an "always" makes the next run of the schedule ask again; the revoke is audited."""
    node, tool = await _node(node_factory, {"approvals": {"cron_mode": "ask"}})
    run1 = await start(node, [noop("x", tool="notify_team")], mode=RunMode.SCHEDULED,
                       schedule="nightly")
    await answer(node, run1.id, Scope.ALWAYS)
    [grant] = await node.store.list_grants()
    revoked = await node.decider.revoke_grant(grant.id, "web:admin")
    assert revoked is not None and revoked.revoked_at is not None
    assert await node.store.list_grants() == []
    assert len(await node.store.list_grants(include_revoked=True)) == 1
    run2 = await start(node, [noop("x", tool="notify_team")], mode=RunMode.SCHEDULED,
                       schedule="nightly")
    assert run2.state is TaskState.WAITING_APPROVAL
    assert tool.runs == 1
    kinds = [(e.kind, e.actor) for e in await audit_log(node)]
    assert ("grant_revoked", "web:admin") in kinds


@pytest.mark.parametrize("scope", [Scope.SESSION, Scope.ALWAYS])
async def test_a_blocked_task_has_nothing_left_to_approve(node_factory: NodeFactory,
                                                          scope: Scope) -> None:
    """After a BLOCK there is no pending request; answering the task's old request is refused."""
    node, tool = await _node(node_factory)
    task = await start(node, [noop("x", tool="notify_team"), delete("gone.txt")],
                       prohibit=["DESTRUCTIVE"])
    assert task.approval is not None
    first = task.approval.id
    _, after = await answer(node, task.id, scope)
    assert after.state is TaskState.FAILED and after.result is not None
    assert after.result["reason"].startswith("blocked: prohibited")
    assert (await node.store.pending_approvals()).items == []
    again = await node.decider.decide(first, Scope.ONCE, "web:admin")
    assert not again.accepted and again.code == "already_decided"
    assert tool.runs == 1 and not (node.work_dir / "gone.txt").exists()


class _InterleavingStore(MemTaskStore):
    """MemTaskStore that yields after reading a request, as a database round trip would."""

    async def get_approval(self, approval_id: str) -> Any:
        found = await super().get_approval(approval_id)
        await asyncio.sleep(0)
        return found


async def test_an_answer_losing_the_race_is_told_already_decided_and_audited(
        node_factory: NodeFactory) -> None:
    """Two answers read the pending request; the one that commits second is a late answer.

    It must get "Already decided by X at T" and leave a "refused" audit event, whether it
    lost at the commit or just before it (the task already moved on).
    """
    node, tool = await _node(node_factory, store=_InterleavingStore(), clock=FakeClock())
    task = await start(node, [noop("x", tool="notify_team")])
    assert task.approval is not None
    first, second = await asyncio.gather(
        node.decider.decide(task.approval.id, Scope.ONCE, "web:alice"),
        node.decider.decide(task.approval.id, Scope.ONCE, "web:bob"))
    assert first.accepted and not second.accepted
    assert tool.runs == 1
    assert (second.code, second.message) == ("already_decided",
                                              "Already decided by web:alice at 12:00 UTC")
    last = (await audit_log(node))[-1]
    assert (last.kind, last.actor) == ("refused", "web:bob")


def test_grants_of_outside_requests_and_tasks_never_cover_each_other() -> None:
    """covers(): a request (task_id None) takes only grants of requests; a task never takes
    a request's grant, even an always one under the same key."""
    base = dict(key="signoff:p:k", policy_id="p", tool="send_email", capability="email.send",
                risk=RiskClass.SEND, fingerprint="fp")
    of_request = Grant(id="g-1", task_id=None, scope=Scope.ALWAYS, **base)
    of_task = Grant(id="g-2", task_id="t-1", scope=Scope.ALWAYS, **base)
    session = Grant(id="g-3", task_id=None, scope=Scope.SESSION, **base)
    assert covers(of_request, task_id=None, now=NOW) and covers(session, task_id=None, now=NOW)
    assert not covers(of_request, task_id="t-1", now=NOW)
    assert not covers(of_task, task_id=None, now=NOW) and covers(of_task, task_id="t-2", now=NOW)
    used = Grant(id="g-4", task_id=None, scope=Scope.ONCE, max_calls=1, used=1, **base)
    assert not covers(used, task_id=None, now=NOW)
