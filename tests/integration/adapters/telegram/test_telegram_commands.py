"""Typed answers on a real node: ``/approve <id>`` approves only where the request's card
shows the whole action — in the approval chat, once the card is there — and ``/deny``
from anywhere (the real TelegramSurface and flow, the fake Bot API)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from signoff.adapters.telegram import TelegramSurface
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import RiskClass, Scope, Task, TaskState
from signoff.wiring import Node
from tests.factories import NoopTool, audit_log, noop, run_inline
from tests.fakes.telegram_api import FakeTelegramApi, user

CHAT = "-1001234567890"
DM = "42"  # user 42's private chat with the bot
PUBLIC = "https://signoff.example.com"


@dataclass
class Rig:
    """A node whose one surface is Telegram (polling) on the fake; user 42 approves."""

    node: Node
    telegram: FakeTelegramApi

    async def start(self, *, deliver: bool = True) -> Task:
        """Submit one SEND step and run it until it waits; post its card if ``deliver``."""
        task = await self.node.engine.submit("report", claim=True,
                                             steps=[noop("report", tool="notify_team")])
        assert task is not None
        task = await self.node.engine.advance(task)
        assert task.state is TaskState.WAITING_APPROVAL and task.approval is not None
        if deliver:
            await self.node.flow.dispatcher.run_once()
        return task

    async def command(self, text: str, chat: str = CHAT) -> str:
        """User 42 types ``text`` in ``chat``; the bot's answer."""
        update = self.telegram.command_update(chat, text, user(42, "alice"))
        asked = update["message"]["message_id"]
        self.telegram.push_update(update)

        def answers() -> list[Any]:
            return [m for m in self.telegram.chat_messages(chat) if m.message_id > asked]

        await self.telegram.wait_until(lambda: bool(answers()))
        return str(answers()[0].text)

    async def state(self, task: Task) -> TaskState:
        """The task's state as stored."""
        stored = await self.node.store.get_task(task.id)
        assert stored is not None
        return stored.state


@pytest.fixture
async def rig(node_factory: Any) -> AsyncIterator[Rig]:
    """Telegram on the fake Bot API as the node's surface, taking updates."""
    async with FakeTelegramApi() as api:
        telegram = TelegramSurface(bot_token=api.token, chat_id=CHAT, base_url=api.base_url,
                                   base_file_url=api.base_file_url, timeout=5.0)
        node = await node_factory({"daemon": {"public_url": PUBLIC}}, clock=FakeClock(),
                                  approvers=("telegram:42",), surfaces={"telegram": telegram})
        node.registry.register(NoopTool(name="notify_team", capability="team.notify",
                                        risk=RiskClass.SEND))
        run_inline(node)
        polling = asyncio.create_task(telegram.run(node.flow.on_decision))
        await api.wait_call("getUpdates")
        yield Rig(node, api)
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await telegram.aclose()


async def test_approve_in_a_dm_decides_nothing_and_in_the_approval_chat_it_does(
        rig: Rig) -> None:
    """An approver's /approve in their DM with the bot (no card there) is answered with
    where to approve and leaves the request pending; the same command in the approval
    chat, under the card, approves it and the task runs."""
    task = await rig.start()
    assert task.approval is not None
    dm = await rig.command(f"/approve {task.approval.id} always", chat=DM)
    assert "only in the approval chat" in dm
    assert await rig.state(task) is TaskState.WAITING_APPROVAL
    assert await rig.node.store.list_grants() == []
    assert [e for e in await audit_log(rig.node) if e.kind == "decision"] == []

    there = await rig.command(f"/approve {task.approval.id}")
    assert there.startswith("Approved once")
    assert await rig.state(task) is TaskState.COMPLETED


async def test_approve_typed_before_the_card_reached_the_chat_decides_nothing(
        rig: Rig) -> None:
    """The id typed in the approval chat while its card is not there (not delivered yet,
    or never: the id came from /pending or another surface) approves nothing: the person
    is sent to the console and the attempt is audited. Once the card is posted, the same
    command approves."""
    task = await rig.start(deliver=False)
    assert task.approval is not None
    reply = await rig.command(f"/approve {task.approval.id}")
    assert reply == f"Confirm in the console: {PUBLIC}/console/cards/{task.approval.id}"
    assert await rig.state(task) is TaskState.WAITING_APPROVAL
    [refused] = [e for e in await audit_log(rig.node) if e.kind == "refused"]
    assert (refused.actor, refused.reason) == (
        "telegram:42", "typed approval: its card is not shown where it was typed")

    await rig.node.flow.dispatcher.run_once()
    assert (await rig.command(f"/approve {task.approval.id}")).startswith("Approved once")
    assert await rig.state(task) is TaskState.COMPLETED


async def test_deny_typed_anywhere_is_taken(rig: Rig) -> None:
    """/deny from a DM, for a request whose card was never posted, denies it: a deny
    approves nothing, so it needs no card (fail closed)."""
    task = await rig.start(deliver=False)
    assert task.approval is not None
    reply = await rig.command(f"/deny {task.approval.id} not tonight", chat=DM)
    assert reply.startswith("Denied")
    stored = await rig.node.store.get_approval(task.approval.id)
    assert stored is not None and stored.scope is Scope.DENY
    assert await rig.state(task) is TaskState.FAILED
