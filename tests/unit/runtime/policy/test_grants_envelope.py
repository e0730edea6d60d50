"""A schedule's grants declared up front in config: the pre-authorized envelope (issue 3).

``[[schedules]] grants = [{tool = "send_email", to = ["ops@example.com"]}]``: runs of that
schedule may do exactly those actions unattended; anything outside goes through cron_mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from signoff.runtime.models import RunMode, TaskState
from signoff.runtime.store.memory import MemTaskStore
from tests.conftest import NodeFactory
from tests.factories import audit_log, email, start
from tests.fakes.smtp import FakeSmtpServer

OPS = "ops@example.com"


@pytest.fixture
def smtp() -> Iterator[FakeSmtpServer]:
    """A real SMTP server on 127.0.0.1."""
    with FakeSmtpServer() as server:
        yield server


def _config(smtp: FakeSmtpServer, grant: dict[str, Any]) -> dict[str, Any]:
    return {"email": {"host": smtp.host, "port": smtp.port},
            "schedules": [{"name": "nightly", "every": "1h", "goal": "report",
                           "grants": [grant]}]}


async def test_a_schedule_may_declare_grants_up_front_as_in_the_issue_example(
        node_factory: NodeFactory, smtp: FakeSmtpServer) -> None:
    """The issue's own example (`to` only, no subject or body) builds and covers mail to ops."""
    node = await node_factory(_config(smtp, {"tool": "send_email", "to": [OPS]}),
                              store=MemTaskStore())
    task = await start(node, [email(OPS)], mode=RunMode.SCHEDULED, schedule="nightly")
    assert task.state is TaskState.COMPLETED
    assert [m.recipients for m in smtp.messages] == [[OPS]]


@pytest.mark.parametrize(("schedule", "to", "expected"), [
    ("nightly", OPS, TaskState.COMPLETED),  # inside the envelope
    ("nightly", "Ops <OPS@example.com>", TaskState.COMPLETED),  # same recipient, respelled
    ("nightly", "mary@example.com", TaskState.FAILED),  # outside: cron_mode deny blocks
    ("weekly", OPS, TaskState.FAILED),  # another schedule has no such envelope
])
async def test_a_schedule_envelope_covers_only_its_own_schedule_and_targets(
        node_factory: NodeFactory, smtp: FakeSmtpServer, schedule: str, to: str,
        expected: TaskState) -> None:
    """The envelope allows exactly its actions in its own schedule; the rest follows cron_mode."""
    grant = {"tool": "send_email", "to": [OPS], "subject": "-", "body": "-"}
    node = await node_factory(_config(smtp, grant), store=MemTaskStore())
    task = await start(node, [email(to, body="tonight's numbers")], mode=RunMode.SCHEDULED,
                       schedule=schedule)
    assert task.state is expected
    if expected is TaskState.COMPLETED:
        assert task.actions[-1].decided_by == "auto:grant"
        last = (await audit_log(node))[-1]
        assert (last.kind, last.decision, last.actor) == ("evaluation", "ALLOW", "auto:grant")
    else:
        assert smtp.messages == []


async def test_a_schedule_envelope_does_not_cover_interactive_tasks(
        node_factory: NodeFactory, smtp: FakeSmtpServer) -> None:
    """The same action submitted by hand still asks a person."""
    grant = {"tool": "send_email", "to": [OPS], "subject": "-", "body": "-"}
    node = await node_factory(_config(smtp, grant), store=MemTaskStore())
    task = await start(node, [email(OPS)])
    assert task.state is TaskState.WAITING_APPROVAL
