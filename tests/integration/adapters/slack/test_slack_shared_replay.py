"""Slack's replay guard shared through PostgreSQL: two nodes (two SlackSurfaces in http
mode on one ledger table) act on a request once, whichever of them receives the copy."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest

from signoff.bot.ports import DecisionEvent, DecisionOutcome
from signoff.runtime.clock import SystemClock
from signoff.runtime.models import Scope
from signoff.runtime.store.postgres.replay import SqlReplayLedger
from signoff.testing import sample_card
from tests.fakes.slack_api import SECRET, FakeSlack, SlackHarness, sign, signed_interaction

pytestmark = pytest.mark.postgres


class Decisions:
    """Records every decision handed to the flow, on any node."""

    def __init__(self) -> None:
        self.events: list[DecisionEvent] = []

    async def __call__(self, event: DecisionEvent) -> DecisionOutcome:
        self.events.append(event)
        return DecisionOutcome(True, "Approved once")


@pytest.fixture
async def two_nodes(pg_url: str) -> AsyncIterator[tuple[list[SlackHarness], Decisions]]:
    async with FakeSlack() as fake:
        ledgers = [SqlReplayLedger(url=pg_url, clock=SystemClock()) for _ in range(2)]
        nodes = [SlackHarness.http_mode(fake, replay=ledger) for ledger in ledgers]
        decisions = Decisions()
        for node in nodes:
            await node.start(decisions)
        yield nodes, decisions
        for node in nodes:
            await node.stop()
        for ledger in ledgers:
            await ledger.close()


async def test_a_click_replayed_to_another_node_is_refused_there(
        two_nodes: tuple[list[SlackHarness], Decisions]) -> None:
    """The same signed click sent to node A and then to node B: 200, then 401; one decision."""
    (a, b), decisions = two_nodes
    ref = await a.surface.post_card(sample_card())
    body, headers = signed_interaction(SECRET, a.payload(ref, Scope.ONCE, "U0ALICE"))
    first = await a.post(body, headers)
    await asyncio.wait_for(a.outcomes.get(), 5)
    again = await b.post(body, headers)
    assert (first.status_code, again.status_code) == (200, 401)
    assert len(decisions.events) == 1


async def test_a_click_sent_to_both_nodes_at_once_is_acted_on_once(
        two_nodes: tuple[list[SlackHarness], Decisions]) -> None:
    """Both copies arrive together: exactly one node answers 200."""
    (a, b), decisions = two_nodes
    ref = await a.surface.post_card(sample_card())
    body, headers = signed_interaction(SECRET, a.payload(ref, Scope.ONCE, "U0ALICE"))
    answers = await asyncio.gather(a.post(body, headers), b.post(body, headers))
    assert sorted(r.status_code for r in answers) == [200, 401]
    await asyncio.sleep(0.2)  # a second decision, were there one, would be recorded by now
    assert len(decisions.events) == 1


async def test_an_event_retried_with_a_new_signature_is_refused_by_its_event_id(
        two_nodes: tuple[list[SlackHarness], Decisions]) -> None:
    """Slack retries an Events API callback (same event_id, new timestamp and signature)
    to another node: refused as a replay."""
    (a, b), _ = two_nodes
    event = {"type": "event_callback", "event_id": "Ev0RETRIED", "team_id": "T0TEAM",
             "event": {"type": "app_mention", "text": "hi", "user": "U0ALICE",
                       "channel": "C0APPROVALS", "ts": "1.2"}}
    body = json.dumps(event).encode()
    now = int(time.time())
    first = await a.post(body, {**sign(SECRET, body, timestamp=now),
                                "Content-Type": "application/json"})
    retry = await b.post(body, {**sign(SECRET, body, timestamp=now + 1),
                                "Content-Type": "application/json",
                                "X-Slack-Retry-Num": "1"})
    assert first.status_code != 401
    assert retry.status_code == 401
