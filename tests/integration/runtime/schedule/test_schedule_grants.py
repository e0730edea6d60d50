"""A schedule's Always grants belong to its definition (name, goal, steps), on real stores:
later runs of it — after a restart, after a new cron line — run unasked, while a schedule
given another goal or other steps, or a new schedule under a removed one's name, asks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from signoff.runtime.models import Scope, Task, TaskState
from signoff.runtime.schedule.scheduler import Scheduler
from signoff.wiring import Node
from tests.factories import answer, run_inline
from tests.fakes.smtp import FakeSmtpServer

T = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
TEAM = "team@example.com"
# The step a person approves with Always. A send_email grant covers its recipients, never
# its subject or body (content): only the definition tells one "nightly" from another.
REPORT = {"tool": "send_email",
          "args": {"to": TEAM, "subject": "Nightly report", "body": "All green."}}
NIGHTLY = {"name": "nightly", "cron": "0 3 * * *", "goal": "send the report to the team",
           "steps": [REPORT]}


@pytest.fixture
def smtp() -> Iterator[FakeSmtpServer]:
    """A real SMTP server on 127.0.0.1 that records what it receives."""
    with FakeSmtpServer() as server:
        yield server


async def daemon(node_factory: Any, store_url: str, smtp: FakeSmtpServer,
                 schedule: dict[str, Any]) -> tuple[Node, Scheduler]:
    """One daemon life on the shared database, configured with ``schedule``; scheduled runs
    ask (cron_mode = "ask") and wait for an answer on the recording surface."""
    node = await node_factory({
        "schedules": [schedule], "approvals": {"cron_mode": "ask"},
        "email": {"host": smtp.host, "port": smtp.port, "from": "agent@example.com"}},
        database=store_url)
    run_inline(node)
    assert node.scheduler is not None
    return node, node.scheduler


async def run(node: Node, scheduler: Scheduler, at: datetime) -> Task:
    """Fire "nightly" at ``at`` and advance its run until it waits or ends."""
    fired = await scheduler.fire("nightly", at)
    assert fired is not None
    cfg = node.engine.config
    claimed = await node.store.claim_next(cfg.node_id, node.engine.clock.now() + cfg.lease)
    assert claimed is not None and claimed.id == fired.id
    task = await node.engine.advance(claimed)
    await node.flow.dispatcher.run_once()
    return task


async def approved_always(node_factory: Any, store_url: str, smtp: FakeSmtpServer) -> None:
    """The first life: the first run of "nightly" asks and is approved with Always."""
    node, scheduler = await daemon(node_factory, store_url, smtp, NIGHTLY)
    first = await run(node, scheduler, T)
    assert first.state is TaskState.WAITING_APPROVAL
    outcome, done = await answer(node, first.id, Scope.ALWAYS)
    assert outcome.accepted and done.state is TaskState.COMPLETED


async def test_an_unchanged_schedule_keeps_its_always_after_a_restart(
        node_factory: Any, store_url: str, smtp: FakeSmtpServer) -> None:
    """Restarted with the same [[schedules]] entry, the next run is covered by the Always:
    it sends without a card."""
    await approved_always(node_factory, store_url, smtp)
    node, scheduler = await daemon(node_factory, store_url, smtp, NIGHTLY)
    later = await run(node, scheduler, T + timedelta(days=1))
    assert later.state is TaskState.COMPLETED
    assert later.actions[-1].decision == "grant"  # run by the Always, nobody asked
    assert [m.recipients for m in smtp.messages] == [[TEAM], [TEAM]]


async def test_a_new_time_keeps_the_always(node_factory: Any, store_url: str,
                                          smtp: FakeSmtpServer) -> None:
    """Moving the schedule to another time (cron line, time zone) and changing its guards
    (timeout) is not a new definition: the Always still covers its runs."""
    await approved_always(node_factory, store_url, smtp)
    moved = {**NIGHTLY, "cron": "30 4 * * 1-5", "timezone": "Europe/Berlin", "timeout": "2h"}
    node, scheduler = await daemon(node_factory, store_url, smtp, moved)
    later = await run(node, scheduler, T + timedelta(days=1))
    assert later.state is TaskState.COMPLETED
    assert len(smtp.messages) == 2


async def test_a_new_schedule_under_a_removed_ones_name_asks_again(
        node_factory: Any, store_url: str, smtp: FakeSmtpServer) -> None:
    """"nightly" (send the report) is removed; a new "nightly" mails other words to the
    same team: the old schedule's Always does not cover it — a card asks, nothing is sent."""
    await approved_always(node_factory, store_url, smtp)
    other = {"name": "nightly", "cron": "0 3 * * *", "goal": "tell the team we are closing",
             "steps": [{"tool": "send_email", "args": {
                 "to": TEAM, "subject": "Goodbye", "body": "We are closing, bye."}}]}
    node, scheduler = await daemon(node_factory, store_url, smtp, other)
    later = await run(node, scheduler, T + timedelta(days=1))
    assert later.state is TaskState.WAITING_APPROVAL
    assert later.approval is not None
    assert later.approval.action.args["subject"] == "Goodbye"
    assert len(smtp.messages) == 1  # the report only


async def test_an_edited_goal_asks_again_and_its_own_always_carries_on(
        node_factory: Any, store_url: str, smtp: FakeSmtpServer) -> None:
    """Editing the goal alone is a new definition too (the Always was given for the old
    goal); an Always given for the new definition covers its later runs."""
    await approved_always(node_factory, store_url, smtp)
    edited = {**NIGHTLY, "goal": "send the report and the salaries to the team"}
    node, scheduler = await daemon(node_factory, store_url, smtp, edited)
    asked = await run(node, scheduler, T + timedelta(days=1))
    assert asked.state is TaskState.WAITING_APPROVAL
    _, done = await answer(node, asked.id, Scope.ALWAYS)
    assert done.state is TaskState.COMPLETED
    again = await run(node, scheduler, T + timedelta(days=2))
    assert again.state is TaskState.COMPLETED
    assert len(smtp.messages) == 3
