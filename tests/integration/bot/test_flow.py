"""The approval flow across surfaces: first valid answer wins, every copy is edited,
refusals are audited, faults and restarts lose nothing."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from signoff.bot.ports import ApprovalCard, CardRef
from signoff.config.settings import Settings
from signoff.errors import PlatformUnavailable, RateLimited
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, Scope, TaskState
from signoff.runtime.outside import OutsideRequests, RequestSpec
from signoff.testing import RecordingSurface
from signoff.wiring import Node, build_node

DELETE = [Action(tool="delete_file", args={"path": "old.txt"})]


def make(tmp_path: Path, surfaces: dict[str, Any], *, clock: FakeClock | None = None,
         **settings: Any) -> Node:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "old.txt").write_text("old")
    data: dict[str, Any] = {"daemon": {"work_dir": str(work)},
                            "approvals": {"approvers": ["slack:U1"]}, **settings}
    return build_node(Settings.model_validate(data), surfaces=surfaces, clock=clock,
                      database=f"sqlite:///{tmp_path / 'signoff.db'}")


async def waiting(node: Node, steps: list[Action] = DELETE):
    await node.store.open()
    task = await node.engine.submit("clean up", steps=steps, claim=True)
    assert task is not None
    task = await node.engine.advance(task)
    assert task.state is TaskState.WAITING_APPROVAL
    await node.flow.dispatcher.run_once()
    return task


def only_ref(p: RecordingSurface) -> CardRef:
    (message_id,) = p.messages
    return CardRef(p.name, "recording", message_id)


class Named(RecordingSurface):
    """A RecordingSurface whose users are `slack:` ids, to look like a second surface."""


async def test_a_decision_on_one_surface_edits_the_card_on_the_other(tmp_path: Path) -> None:
    """Approve on one surface: the task runs and both copies show the outcome."""
    one, two = RecordingSurface(name="slack"), RecordingSurface(name="telegram")
    node = make(tmp_path, {"slack": one, "telegram": two})
    task = await waiting(node)
    one.attach(node.flow.on_decision)
    two.attach(node.flow.on_decision)
    outcome = await one.click(only_ref(one), Scope.ONCE, "U1")
    assert outcome.accepted and outcome.message == "Approved once"
    await node.engine.advance(await node.worker._ready.get())
    await node.flow.dispatcher.run_once()
    for p in (one, two):
        card = p.card(only_ref(p))
        assert card.status == "approved" and card.outcome is not None
        assert "by slack:U1" in card.outcome
        assert p.rendered(only_ref(p)).buttons == ()
    done = await node.store.get_task(task.id)
    assert done is not None and done.state is TaskState.COMPLETED
    await node.store.close()


async def test_a_second_click_is_told_already_decided_and_audited(tmp_path: Path) -> None:
    """After the first answer, another click is refused with who decided, and audited."""
    one, two = RecordingSurface(name="slack"), RecordingSurface(name="web")
    node = make(tmp_path, {"slack": one, "web": two})
    task = await waiting(node)
    one.attach(node.flow.on_decision)
    two.attach(node.flow.on_decision)
    await two.click(only_ref(two), Scope.DENY, "admin")
    late = await one.click(only_ref(one), Scope.ONCE, "U1")
    assert not late.accepted and late.code == "already_decided"
    assert "Already decided by web:admin" in late.message
    events = (await node.store.audit_events(task_id=task.id)).items
    assert [(e.kind, e.actor) for e in events][-2:] == [("decision", "web:admin"),
                                                        ("refused", "slack:U1")]
    assert (tmp_path / "work" / "old.txt").exists()
    await node.store.close()


async def test_an_unauthorized_actor_is_refused_and_audited(tmp_path: Path) -> None:
    """Someone not in the approvers list cannot decide; the task keeps waiting."""
    slack = RecordingSurface(name="slack")
    node = make(tmp_path, {"slack": slack})
    task = await waiting(node)
    slack.attach(node.flow.on_decision)
    outcome = await slack.click(only_ref(slack), Scope.ONCE, "U_STRANGER")
    assert not outcome.accepted and outcome.code == "not_authorized"
    still = await node.store.get_task(task.id)
    assert still is not None and still.state is TaskState.WAITING_APPROVAL
    last = (await node.store.audit_events(task_id=task.id)).items[-1]
    assert (last.kind, last.actor) == ("refused", "slack:U_STRANGER")
    await node.store.close()


async def test_a_scope_outside_the_allowed_buttons_is_refused(tmp_path: Path) -> None:
    """`[approvals.scopes] DESTRUCTIVE = ["once", "deny"]` is enforced server-side."""
    slack = RecordingSurface(name="slack")
    node = make(tmp_path, {"slack": slack},
                approvals={"approvers": ["slack:U1"], "scopes": {"DESTRUCTIVE": ["once", "deny"]}})
    await waiting(node)
    slack.attach(node.flow.on_decision)
    assert slack.rendered(only_ref(slack)).buttons == ("Once", "Deny")
    outcome = await slack.click(only_ref(slack), Scope.ALWAYS, "U1")
    assert not outcome.accepted and outcome.code == "scope_not_allowed"
    assert (await slack.click(only_ref(slack), Scope.ONCE, "U1")).accepted
    await node.store.close()


class Flaky(RecordingSurface):
    """Fails 30% of calls: half as a 5xx, half as a 429 — but only BEFORE doing anything."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.rng = random.Random(7)
        self.attempts = 0

    def _roll(self) -> None:
        self.attempts += 1
        roll = self.rng.random()
        if roll < 0.15:
            raise PlatformUnavailable("503 from the fake")
        if roll < 0.30:
            raise RateLimited("429 from the fake", retry_after=1)

    async def post_card(self, card: ApprovalCard) -> CardRef:
        self._roll()
        return await super().post_card(card)

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        self._roll()
        await super().update_card(ref, card)


async def test_a_flaky_surface_ends_with_every_card_posted_once_and_updated(tmp_path: Path) -> None:
    """With 30% 5xx/429 failures, every card is posted exactly once and every edit lands."""
    clock = FakeClock()
    flaky = Flaky(name="slack")
    # Twenty identical requests on purpose, each with its own card: coalescing off.
    node = make(tmp_path, {"slack": flaky}, clock=clock,
                approvals={"approvers": ["slack:U1"], "coalesce": False})
    await node.store.open()
    ids = []
    for n in range(20):
        task = await node.engine.submit(f"t{n}", steps=DELETE, claim=True)
        assert task is not None
        task = await node.engine.advance(task)
        ids.append(task.approval.id)  # type: ignore[union-attr]
    for _ in range(400):
        await node.flow.dispatcher.run_once()
        clock.advance(5)
        if len(flaky.messages) == 20:
            break
    for approval_id in ids:
        await node.decider.decide(approval_id, Scope.DENY, "web:admin")
    for _ in range(400):
        await node.flow.dispatcher.run_once()
        clock.advance(5)
        if all(m.edits for m in flaky.messages.values()):
            break
    posted = sorted(m.card.approval_id for m in flaky.messages.values())
    assert posted == sorted(ids), "each card exactly once"
    assert all(m.edits == 1 and m.card.status == "denied" for m in flaky.messages.values())
    assert flaky.attempts > 40, "failures really happened"
    await node.store.close()


class Down(RecordingSurface):
    """A surface that is down for the whole run."""

    async def post_card(self, card: ApprovalCard) -> CardRef:
        raise PlatformUnavailable("connection refused")


async def test_a_surface_that_is_down_does_not_hold_up_the_others(tmp_path: Path) -> None:
    """Cards reach the working surface and its decision completes the task."""
    down, up = Down(name="telegram"), RecordingSurface(name="slack")
    node = make(tmp_path, {"telegram": down, "slack": up})
    task = await waiting(node)
    up.attach(node.flow.on_decision)
    assert (await up.click(only_ref(up), Scope.ONCE, "U1")).accepted
    done = await node.engine.advance(await node.worker._ready.get())
    assert done.state is TaskState.COMPLETED and done.id == task.id
    await node.store.close()


async def test_after_a_restart_the_old_card_still_decides_the_task(tmp_path: Path) -> None:
    """A new node on the same database honours a click on a card posted before the crash."""
    slack = RecordingSurface(name="slack")
    first = make(tmp_path, {"slack": slack})
    task = await waiting(first)
    ref = only_ref(slack)  # the first node dies here without closing anything
    second = make(tmp_path, {"slack": slack})
    await second.store.open()
    await second.engine.recover()
    slack.attach(second.flow.on_decision)
    assert (await slack.click(ref, Scope.SESSION, "U1")).accepted
    done = await second.engine.advance(await second.worker._ready.get())
    assert done.state is TaskState.COMPLETED and done.id == task.id
    await second.flow.dispatcher.run_once()
    assert slack.card(ref).status == "approved"
    await second.store.close()


async def test_expiry_edits_every_card_to_expired(tmp_path: Path) -> None:
    """A request past its timeout is denied as "approval timed out" on every copy."""
    clock = FakeClock()
    slack = RecordingSurface(name="slack")
    node = make(tmp_path, {"slack": slack}, clock=clock, approvals={"timeout": "10m"})
    task = await waiting(node)
    clock.advance(601)
    expired = await node.decider.expire_due()
    assert [t.id for t in expired] == [task.id]
    assert expired[0].result == {"reason": "approval timed out", "step": 0}
    await node.flow.dispatcher.run_once()
    card = slack.card(only_ref(slack))
    assert card.status == "expired" and card.outcome and card.outcome.startswith("Expired")
    assert [e.actor for e in (await node.store.audit_events(task_id=task.id)).items][-1] == \
        "auto:timeout"
    await node.store.close()


async def test_a_finished_task_is_reported_under_its_card(tmp_path: Path) -> None:
    """When an approved task completes, each surface gets a reply threaded under the card."""
    slack = RecordingSurface(name="slack")
    node = make(tmp_path, {"slack": slack})
    task = await waiting(node)
    slack.attach(node.flow.on_decision)
    await slack.click(only_ref(slack), Scope.ONCE, "U1")
    await node.engine.advance(await node.worker._ready.get())
    await node.flow.dispatcher.run_once()
    channel, text, thread = slack.notes[-1]
    assert thread == only_ref(slack) and channel == "recording"
    assert text == f"Task {task.id} completed"
    await node.store.close()


async def test_a_chat_click_from_the_askers_other_account_is_refused(tmp_path: Path) -> None:
    """Alice asks with her API key (web:alice) and clicks Once in Slack (slack:U1, also
    hers): refused as self-approval, audited, still pending; slack:U2 approves it and
    the card names who decided."""
    slack = RecordingSurface(name="slack")
    node = make(tmp_path, {"slack": slack},
                approvals={"approvers": ["slack:U1", "slack:U2"]},
                people=[{"name": "alice", "accounts": ["web:alice", "slack:U1"]},
                        {"name": "bob", "accounts": ["slack:U2"]}])
    await node.store.open()
    desk = OutsideRequests(engine=node.engine)
    asked, _ = await desk.submit(RequestSpec(
        tool="send_email", args={"to": "john@example.com", "subject": "hi", "body": "x"},
        policy_id="s-1", requester="hermes:alice", submitted_by="web:alice"))
    await node.flow.dispatcher.run_once()
    slack.attach(node.flow.on_decision)
    own = await slack.click(only_ref(slack), Scope.ONCE, "U1")
    assert not own.accepted and own.code == "not_authorized"
    assert "someone else must approve" in own.message
    still = await node.store.get_approval(asked.id)
    assert still is not None and still.status.value == "pending"
    last = (await node.store.audit_events()).items[-1]
    assert (last.kind, last.actor, last.approval_id) == ("refused", "slack:U1", asked.id)
    theirs = await slack.click(only_ref(slack), Scope.ONCE, "U2")
    assert theirs.accepted
    await node.flow.dispatcher.run_once()
    assert "Approved once by bob" in (slack.card(only_ref(slack)).outcome or "")
    await node.store.close()
