"""The daemon's own app serves Teams: /teams/messages sits outside the API key (the Bot
Framework JWT is its check) and a signed click there decides a real request."""

from __future__ import annotations

from pathlib import Path

from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, ApprovalStatus, TaskState
from tests.api.helpers import make_settings, running_node
from tests.contract.test_teams_contract import ALICE, NOW, teams_platform
from tests.fakes.teams_api import FakeTeams


async def test_the_daemon_serves_teams_clicks_without_an_api_key(tmp_path: Path) -> None:
    """With api.key set, an unsigned POST /teams/messages is 401 from the surface itself,
    and Alice's signed click (no API key) approves the waiting request."""
    clock = FakeClock(NOW)
    settings = make_settings(tmp_path, keys=True, approvals={"approvers": [f"teams:{ALICE}"]})
    async with FakeTeams() as fake:
        platform = teams_platform(fake, clock)
        async with running_node(tmp_path, settings=settings, clock=clock,
                                surfaces={"teams": platform}) as node, \
                node.client(key=None) as client:
            task = await node.node.engine.submit("call", claim=True, steps=[
                Action(tool="send_webhook", args={"url": "http://127.0.0.1:9/", "payload": {}})])
            assert task is not None
            task = await node.node.engine.advance(task)
            assert task.state is TaskState.WAITING_APPROVAL and task.approval is not None
            await node.node.flow.dispatcher.run_once()
            assert fake.posted, "the card reached Teams"
            click = fake.click(fake.posted[0], "Once", aad=ALICE)
            unsigned = await client.post("/teams/messages", json=click)
            assert (unsigned.status_code, unsigned.text) == (401, "unauthorized")
            signed = await client.post("/teams/messages", json=click, headers={
                "Authorization": f"Bearer {fake.sign(click, now=clock.now())}"})
            assert signed.status_code == 200, signed.text
            approval = await node.node.store.get_approval(task.approval.id)
            assert approval is not None and approval.status is not ApprovalStatus.PENDING
        await platform.aclose()
