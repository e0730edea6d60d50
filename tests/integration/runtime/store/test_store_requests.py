"""Outside requests in every store (memory, SQLite, PostgreSQL): idempotency keys, pending
lists of both kinds, budget counts, outcomes recorded once, grants that never cross."""

from __future__ import annotations

from datetime import timedelta

from signoff.runtime import audit
from signoff.runtime.denials import refusal_key
from signoff.runtime.models import (
    Action,
    Approval,
    ApprovalStatus,
    AuditEvent,
    Grant,
    RiskClass,
    Scope,
    Task,
    TaskState,
)
from signoff.runtime.policy.grants import first_valid
from signoff.runtime.store.port import Change, OutboxItem, PendingRequest, TaskStore
from tests.integration.runtime.store.test_store import NOW

ACTION = Action(tool="send_email", args={"to": "j@example.com"}, risk=RiskClass.SEND,
                capability="email.send", targets=("j@example.com",), fingerprint="fp")


def request(n: int, *, key: str | None = None, policy_id: str = "s-1",
            status: ApprovalStatus = ApprovalStatus.PENDING) -> Approval:
    return Approval(id=f"a-{n}", action=ACTION, policy_id=policy_id, requester="hermes",
                    idempotency_key=key, status=status, requested_at=NOW,
                    expires_at=NOW + timedelta(minutes=30))


def new(approval: Approval, *events: AuditEvent, outbox: list[OutboxItem] | None = None
        ) -> Change:
    return Change(at=NOW, approval=approval, insert_approval=True, audit=list(events),
                  outbox=outbox or [])


async def test_a_request_is_stored_with_its_audit_and_card_jobs(store: TaskStore) -> None:
    """One commit stores the request, seals its audit event and queues its card."""
    job = OutboxItem(key="post:a-1", surface="*", kind="post", payload={"approval_id": "a-1"},
                     approval_id="a-1")
    change = new(request(1, key="web:admin k1"), AuditEvent(kind="evaluation",
                                                             approval_id="a-1"), outbox=[job])
    assert await store.commit(change)
    assert change.audit[0].id == 1 and change.audit[0].hash
    stored = await store.get_approval("a-1")
    assert stored is not None and stored.task_id is None and stored.requester == "hermes"
    assert (await store.find_request("web:admin k1")) == stored
    assert await store.find_request("web:admin other") is None
    [due] = await store.due_outbox(NOW)
    assert due.key == "post:a-1" and due.payload == {"approval_id": "a-1"}
    assert (await audit.verify(store)).ok


async def test_a_second_request_with_the_same_key_or_id_loses(store: TaskStore) -> None:
    """Idempotency keys and ids are unique: the duplicate commit writes nothing."""
    assert await store.commit(new(request(1, key="k")))
    assert not await store.commit(new(request(2, key="k"), AuditEvent(kind="evaluation")))
    assert not await store.commit(new(request(1, key="k2")))
    assert await store.get_approval("a-2") is None
    assert await store.audit_head() == (0, audit.GENESIS)


async def test_pending_requests_list_both_kinds_oldest_first(store: TaskStore) -> None:
    """Pending task requests and outside ones share one list and one cursor."""
    task = Task(id="t-1", goal="g", created_at=NOW, updated_at=NOW)
    assert await store.commit(Change(at=NOW, task=task, insert=True))
    ask = Approval(id="a-task", task_id="t-1", action=ACTION, policy_id="t-1", requested_at=NOW,
                   expires_at=NOW + timedelta(minutes=5))
    task.state, task.approval, task.pending_action = TaskState.WAITING_APPROVAL, ask, ACTION
    assert await store.commit(Change(at=NOW, task=task, approval=ask))
    assert await store.commit(new(request(1)))
    assert await store.commit(new(request(2, status=ApprovalStatus.APPROVED)))
    assert await store.commit(new(request(3)))
    first = await store.pending_requests(limit=2)
    items = [i for i in first.items if isinstance(i, PendingRequest)]
    assert [(i.approval.id, i.task.id if i.task else None) for i in items] == [
        ("a-task", "t-1"), ("a-1", None)]
    rest = await store.pending_requests(limit=2, cursor=first.next_cursor)
    assert [i.approval.id for i in rest.items if isinstance(i, PendingRequest)] == ["a-3"]
    assert rest.next_cursor is None


async def test_budget_counts_pending_and_approved_requests_only(store: TaskStore) -> None:
    """count_requests sees the policy_id's pending and approved requests for a capability."""
    assert await store.commit(new(request(1)))
    assert await store.commit(new(request(2, status=ApprovalStatus.APPROVED)))
    assert await store.commit(new(request(3, status=ApprovalStatus.DENIED)))
    assert await store.commit(new(request(4, policy_id="s-2")))
    assert await store.count_requests("s-1", "email.send") == 2
    assert await store.count_requests("s-1", "fs.delete") == 0
    expired = request(1).model_copy(update={"status": ApprovalStatus.EXPIRED})
    assert await store.commit(Change(at=NOW, approval=expired,
                                     approval_expect=ApprovalStatus.PENDING))
    assert await store.count_requests("s-1", "email.send") == 1


async def test_an_outcome_is_recorded_once(store: TaskStore) -> None:
    """The second outcome commit loses and writes nothing, also its audit event."""
    assert await store.commit(new(request(1, status=ApprovalStatus.APPROVED)))
    stored = await store.get_approval("a-1")
    assert stored is not None
    done = stored.model_copy(update={"outcome": {"ok": True}})
    assert await store.commit(Change(at=NOW, approval=done, outcome_for="a-1",
                                     audit=[AuditEvent(kind="outcome")]))
    again = stored.model_copy(update={"outcome": {"ok": False}})
    assert not await store.commit(Change(at=NOW, approval=again, outcome_for="a-1",
                                         audit=[AuditEvent(kind="outcome")]))
    final = await store.get_approval("a-1")
    assert final is not None and final.outcome == {"ok": True}
    assert (await store.audit_head())[0] == 1


async def test_grants_of_tasks_and_outside_requests_never_cross(store: TaskStore) -> None:
    """Under one key, a task is covered only by task grants and a request only by request
    grants (the stores return candidates; `covers` is the rule)."""
    base = dict(key="signoff:p:k", policy_id="p", tool="send_email", capability="email.send",
                risk=RiskClass.SEND, fingerprint="fp", created_at=NOW)
    by_task = Grant(id="g-1", task_id="t-9", scope=Scope.ALWAYS, **base)
    assert await store.commit(Change(at=NOW, grants=[by_task]))

    async def covering(task_id: str | None) -> str | None:
        found = first_valid(await store.grant_candidates("signoff:p:k"), task_id=task_id, now=NOW)
        return found.id if found else None

    assert await covering("t-1") == "g-1"
    assert await covering(None) is None
    by_request = Grant(id="g-2", task_id=None, scope=Scope.SESSION, **base)
    assert await store.commit(Change(at=NOW, grants=[by_request]))
    assert await covering(None) == "g-2"
    assert await covering("t-1") == "g-1"


async def test_reset_forgets_outside_requests(store: TaskStore) -> None:
    """reset removes requests and their idempotency keys."""
    assert await store.commit(new(request(1, key="k")))
    await store.reset()
    assert await store.get_approval("a-1") is None
    assert await store.find_request("k") is None
    assert await store.commit(new(request(1, key="k")))


async def test_a_decision_stores_its_grant_and_loses_a_second_time(store: TaskStore) -> None:
    """Deciding a request is a compare-and-set with its grant and audit event; the grant
    reads back whole through every query."""
    assert await store.commit(new(request(1)))
    grant = Grant(id="g-9", key="signoff:s-1:k", policy_id="s-1", task_id=None,
                  scope=Scope.SESSION, tool="send_email", capability="email.send",
                  risk=RiskClass.SEND, fingerprint="fp", created_at=NOW, created_by="web:bob")
    decided = request(1, status=ApprovalStatus.APPROVED).model_copy(
        update={"scope": Scope.SESSION, "decided_by": "web:bob"})
    first = Change(at=NOW, approval=decided, approval_expect=ApprovalStatus.PENDING,
                   grants=[grant], audit=[AuditEvent(kind="decision", approval_id="a-1")])
    assert await store.commit(first)
    second = Change(at=NOW, approval=decided, approval_expect=ApprovalStatus.PENDING,
                    grants=[grant.model_copy(update={"id": "g-10"})],
                    audit=[AuditEvent(kind="decision")])
    assert not await store.commit(second)
    [listed] = await store.list_grants()
    assert listed == grant
    assert await store.get_grant("g-9") == grant
    assert first_valid(await store.grant_candidates("signoff:s-1:k"), task_id=None, now=NOW) == grant
    assert (await store.audit_head())[0] == 1 and (await audit.verify(store)).ok


def denied(n: int, *, by: str = "web:bob", at_minute: int = 0, policy_id: str = "s-1",
           action: Action = ACTION) -> Approval:
    """A request ``n`` that ``by`` denied ``at_minute`` minutes after NOW."""
    ap = request(n, policy_id=policy_id).model_copy(update={"action": action})
    ap.status, ap.decided_by = ApprovalStatus.DENIED, by
    ap.decided_at = NOW + timedelta(minutes=at_minute)
    return ap


async def test_a_persons_deny_is_found_by_its_refusal_key(store: TaskStore) -> None:
    """remember_deny's look-up: the newest deny by a person of this very action (same
    refusal key) for this policy_id within the window; automatic refusals, other content,
    other policy_ids, other keys' requests and denies older than the window are not it."""
    key = refusal_key(ACTION)
    other_body = ACTION.model_copy(update={"args": {**ACTION.args, "body": "y"},
                                           "content": ("body",)})
    assert await store.commit(new(request(1)))  # asked, then denied by a person
    assert await store.commit(Change(at=NOW, approval=denied(1, at_minute=5)))
    for change in (denied(2, by="auto:remember_deny", at_minute=9),
                   denied(3, policy_id="s-2", at_minute=9),
                   denied(4, action=other_body, at_minute=9)):
        assert await store.commit(new(change))
    found = await store.refused_earlier("s-1", key, NOW)
    assert found is not None and found.id == "a-1" and found.decided_by == "web:bob"
    assert await store.refused_earlier("s-1", key, NOW + timedelta(minutes=6)) is None
    assert await store.refused_earlier("s-9", key, NOW) is None
    in_s2 = await store.refused_earlier("s-2", key, NOW)
    assert in_s2 is not None and in_s2.id == "a-3"
    other = await store.refused_earlier("s-1", refusal_key(other_body), NOW)
    assert other is not None and other.id == "a-4"
    assert await store.commit(new(request(5)))
    assert await store.commit(Change(at=NOW, approval=denied(5, by="tg:ann", at_minute=7)))
    newest = await store.refused_earlier("s-1", key, NOW)
    assert newest is not None and newest.id == "a-5"


async def test_identical_requests_share_a_card_until_one_leaves_its_group(
        store: TaskStore) -> None:
    """A request that joins another's card is found as its member, the first as the
    group's leader; one decided on its own (leaving the group) is a member no longer, and
    once the leader is decided the group has none."""
    leader = request(1).model_copy(update={"coalesce_key": "g"})
    member = request(2).model_copy(update={"coalesce_key": "g", "coalesced_into": "a-1"})
    assert await store.commit(new(leader)) and await store.commit(new(member))
    assert await store.coalesce_leader("g") == leader
    assert [a.id for a in await store.coalesced("a-1")] == ["a-2"]
    alone = member.model_copy(update={"coalesced_into": None, "status": ApprovalStatus.DENIED,
                                      "decided_by": "web:bob", "decided_at": NOW})
    assert await store.commit(Change(at=NOW, approval=alone,
                                     approval_expect=ApprovalStatus.PENDING))
    assert await store.coalesced("a-1") == []
    decided = leader.model_copy(update={"status": ApprovalStatus.APPROVED, "decided_at": NOW})
    assert await store.commit(Change(at=NOW, approval=decided,
                                     approval_expect=ApprovalStatus.PENDING))
    assert await store.coalesce_leader("g") is None
