"""The shared card of identical requests on a surface: posted once, edited as requests
join — a burst of joins is one edit, not one per request."""

from __future__ import annotations

from signoff.runtime.models import RiskClass, Scope
from signoff.testing import RecordingSurface
from tests.conftest import NodeFactory
from tests.factories import NoopTool, noop, run_inline


async def test_a_burst_of_identical_requests_is_one_post_and_one_edit(
        node_factory: NodeFactory) -> None:
    """Five identical requests queued before the outbox runs: one card posted, edited once
    to say "5 identical requests"; the answer is one more edit showing the outcome."""
    recording = RecordingSurface()
    node = await node_factory(surfaces={"recording": recording})
    node.registry.register(NoopTool(name="notify_team", risk=RiskClass.SEND))
    run_inline(node)
    tasks = []
    for _ in range(5):
        task = await node.engine.submit("tell the team", steps=[noop("ops", tool="notify_team")],
                                        claim=True)
        assert task is not None
        tasks.append(await node.engine.advance(task))
    await node.flow.dispatcher.run_once()
    (message,) = recording.messages.values()
    assert message.card.approval_id == tasks[0].approval.id  # type: ignore[union-attr]
    assert message.card.title.endswith("· 5 identical requests")
    # The post already shows all five; the four joins' edits collapse into one.
    assert message.card.identical == 5 and message.edits == 1
    edits = message.edits

    result = await node.decider.decide(message.card.approval_id, Scope.DENY, "recording:alice")
    assert result.accepted
    await node.flow.dispatcher.run_once()
    assert len(recording.messages) == 1 and message.edits == edits + 1
    assert message.card.outcome is not None and message.card.outcome.startswith(
        "Denied by recording:alice")
    assert "5 identical requests" in message.card.title
    for task in tasks:
        after = await node.store.get_task(task.id)
        assert after is not None and after.result == {"reason": "user denied", "step": 0}
