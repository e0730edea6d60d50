"""Issue 17 as people see it through the API and the real Slack and Telegram adapters
(local fakes): time-boxed grants lapse on the Clock, edited args are what runs, and a
step-up request is decided in the console only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import httpx
import pytest

from signoff.adapters.telegram import TelegramSurface
from signoff.adapters.web import WebSurface
from signoff.api.app import create_app
from signoff.bot.ports import CardRef
from signoff.runtime import audit
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, ApprovalStatus, RiskClass, Scope, Task, TaskState
from signoff.runtime.policy.quorum import ApprovalRules
from signoff.wiring import Node, api_context
from tests.factories import NoopTool, audit_log, noop, run_inline
from tests.fakes.slack_api import APPROVALS, FakeSlack, SlackHarness, message_buttons
from tests.fakes.telegram_api import FakeTelegramApi

CHAT = "-1001234567890"
KEY = "admin-key-0123456789abcdef"
PUBLIC = "https://signoff.example.com"
ALICE = "U0ALICE"  # the Slack approver; Telegram's fake user is 42


@dataclass
class RiskyTool(NoopTool):
    """DESTRUCTIVE on target "prod", SEND anywhere else (the registry's risk depends on args)."""

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        """DESTRUCTIVE for prod."""
        return RiskClass.DESTRUCTIVE if args.get("target") == "prod" else RiskClass.SEND


@dataclass
class Rig:
    """A node with Slack (http mode) and Telegram (polling) on fakes, and its API."""

    node: Node
    clock: FakeClock
    slack: FakeSlack
    harness: SlackHarness
    telegram: FakeTelegramApi
    api: httpx.AsyncClient
    tools: dict[str, NoopTool]

    async def start(self, *steps: Action, prohibit: tuple[str, ...] = (),
                    schedule: str | None = None) -> Task:
        """Submit steps and run the task until it waits or ends; deliver the cards (an
        always grant lives under the schedule's name, else the task's own id). A
        schedule's run carries its configured definition, as one the scheduler fires."""
        definitions = self.node.engine.config.schedule_definitions or {}
        task = await self.node.engine.submit(
            "terms", steps=list(steps), claim=True, prohibit=prohibit, schedule=schedule,
            schedule_definition=definitions.get(schedule) if schedule else None)
        assert task is not None
        task = await self.node.engine.advance(task)
        await self.node.flow.dispatcher.run_once()
        return task

    async def task(self, task_id: str) -> Task:
        """The stored task, after any card edits were delivered."""
        await self.node.flow.dispatcher.run_once()
        found = await self.node.store.get_task(task_id)
        assert found is not None
        return found

    def slack_cards(self) -> list[dict[str, Any]]:
        """Cards posted to the approvals channel (thread replies left out)."""
        return [m for (channel, _), m in self.slack.messages.items()
                if channel == APPROVALS and not m.get("thread_ts")]


@pytest.fixture
async def rig(node_factory: Any) -> AsyncIterator[Rig]:
    """Slack and Telegram on fakes, the API in process, ``approvals.grant_ttl = "1h"`` and
    DESTRUCTIVE stepped up."""
    async with FakeSlack() as slack_api, FakeTelegramApi() as telegram_api:
        clock = FakeClock()
        harness = SlackHarness.http_mode(slack_api)
        telegram = TelegramSurface(bot_token=telegram_api.token, chat_id=CHAT,
                                    base_url=telegram_api.base_url,
                                    base_file_url=telegram_api.base_file_url, timeout=5.0)
        config = {"api": {"key": KEY}, "daemon": {"public_url": PUBLIC},
                  "approvals": {"grant_ttl": "1h", "step_up": ["DESTRUCTIVE"]},
                  "schedules": [{"name": "nightly", "cron": "0 3 * * *", "goal": "terms"}]}
        node = await node_factory(config, clock=clock, approvers=(f"slack:{ALICE}",
                                                                  "telegram:42"),
                                  surfaces={"slack": harness.surface, "telegram": telegram})
        tools = {"notify": NoopTool(name="notify_team", capability="team.notify",
                                    risk=RiskClass.SEND),
                 "risky": RiskyTool(name="deploy", capability="app.deploy")}
        for tool in tools.values():
            node.registry.register(tool)
        run_inline(node)
        ctx = api_context(node.settings, store=node.store, engine=node.engine,
                          decider=node.decider, flow=node.flow, clock=clock,
                          wake=node.worker.wake, web=WebSurface())
        await harness.start(node.flow.on_decision)
        polling = asyncio.create_task(telegram.run(node.flow.on_decision))
        await telegram_api.wait_call("getUpdates")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(ctx)),
                                     base_url="http://127.0.0.1",
                                     headers={"Authorization": f"Bearer {KEY}"}) as api:
            yield Rig(node, clock, slack_api, harness, telegram_api, api, tools)
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await harness.stop()
        await telegram.aclose()


def notify(target: str = "x", text: str = "") -> Action:
    """A SEND action of the registered notify_team tool."""
    return noop(target, tool="notify_team", text=text)


def deploy(target: str) -> Action:
    """A deploy: DESTRUCTIVE to prod, SEND elsewhere."""
    return noop(target, tool="deploy")


# --- time-boxed grants ---------------------------------------------------------------------


async def test_a_time_boxed_grant_lapses_and_a_new_card_is_posted(rig: Rig) -> None:
    """Always "for": "30m": identical actions of the schedule run unasked for 30 minutes;
    after that a new card goes to Slack and Telegram, and GET /grants says it lapsed."""
    first = await rig.start(notify(), schedule="nightly")
    assert first.approval is not None and len(rig.slack_cards()) == 1
    answer = await rig.api.post(f"/approvals/{first.approval.id}/approve",
                                json={"scope": "always", "for": "30m"})
    assert answer.status_code == 200, answer.text
    [grant] = (await rig.api.get("/grants")).json()["items"]
    assert grant["expires_at"] == (rig.clock.now() + timedelta(minutes=30)).isoformat()
    assert grant["status"] == "live"

    rig.clock.advance(timedelta(minutes=29))
    covered = await rig.start(notify(), schedule="nightly")
    assert covered.state is TaskState.COMPLETED and len(rig.slack_cards()) == 1

    rig.clock.advance(timedelta(minutes=1))
    asked = await rig.start(notify(), schedule="nightly")
    assert asked.state is TaskState.WAITING_APPROVAL
    assert len(rig.slack_cards()) == 2
    assert len([m for m in rig.telegram.chat_messages(CHAT) if m.reply_to is None]) == 2
    [lapsed] = (await rig.api.get("/grants")).json()["items"]
    assert lapsed["status"] == "lapsed"


async def test_always_without_for_lapses_after_grant_ttl_and_session_for_lapses_too(
        rig: Rig) -> None:
    """An always answer without "for" lasts approvals.grant_ttl; a session answer with
    "for" lapses inside its own task."""
    first = await rig.start(notify("a"))
    assert first.approval is not None
    await rig.api.post(f"/tasks/{first.id}/approve", json={"scope": "always"})
    [always] = (await rig.api.get("/grants")).json()["items"]
    assert always["expires_at"] == (rig.clock.now() + timedelta(hours=1)).isoformat()

    two = await rig.start(notify("b"), notify("b"))
    assert two.approval is not None
    done = await rig.api.post(f"/tasks/{two.id}/approve",
                              json={"scope": "session", "for": "10m"})
    assert done.status_code == 200 and done.json()["state"] == "completed"
    grants = (await rig.api.get("/grants")).json()["items"]
    session = next(g for g in grants if g["scope"] == "session")
    assert session["expires_at"] == (rig.clock.now() + timedelta(minutes=10)).isoformat()


async def test_for_on_once_or_deny_or_a_bad_duration_is_422_and_decides_nothing(
        rig: Rig) -> None:
    """"for" fits only session and always; a bad or zero duration names the field."""
    task = await rig.start(notify())
    assert task.approval is not None
    path = f"/approvals/{task.approval.id}/approve"
    for body in ({"scope": "once", "for": "30m"}, {"scope": "always", "for": "soon"},
                 {"scope": "session", "for": "0s"}):
        refused = await rig.api.post(path, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["detail"].startswith("for: "), refused.json()
    deny = await rig.api.post(f"/tasks/{task.id}/deny", json={"for": "30m"})
    assert deny.status_code == 422
    assert (await rig.task(task.id)).state is TaskState.WAITING_APPROVAL
    assert (await rig.api.get("/grants")).json()["items"] == []


# --- edit before approve -------------------------------------------------------------------


async def test_an_edited_action_runs_and_the_audit_has_both_fingerprints(rig: Rig) -> None:
    """The edited args run (not the asked ones); the decision event holds the edited
    fingerprint and the original one; a session grant covers the edited action."""
    task = await rig.start(notify("x", "asked"), notify("y", "edited"))
    assert task.approval is not None
    original = task.approval.action
    answer = await rig.api.post(f"/tasks/{task.id}/approve", json={
        "scope": "session", "args": {"target": "y", "text": "edited"}})
    assert answer.status_code == 200, answer.text
    done = await rig.task(task.id)
    assert done.state is TaskState.COMPLETED
    assert [r.args["target"] for r in done.actions] == ["y", "y"]  # 2nd covered, unasked
    assert len(rig.slack_cards()) == 1
    edited = rig.node.registry.prepare(notify("y", "edited"))
    [decision] = [e for e in await audit_log(rig.node) if e.kind == "decision"]
    assert (decision.fingerprint, decision.original_fingerprint) == (
        edited.fingerprint, original.fingerprint)
    assert decision.targets == ["y"]
    assert (await audit.verify(rig.node.store)).ok  # the new field keeps the chain sound


async def test_an_edit_never_lowers_the_risk(rig: Rig) -> None:
    """prod (DESTRUCTIVE) edited to staging (SEND by the registry) stays DESTRUCTIVE."""
    task = await rig.start(deploy("prod"))
    assert task.approval is not None and task.approval.action.risk is RiskClass.DESTRUCTIVE
    answer = await rig.api.post(f"/tasks/{task.id}/approve",
                                json={"args": {"target": "staging"}})
    assert answer.status_code == 200, answer.text
    [decision] = [e for e in await audit_log(rig.node) if e.kind == "decision"]
    assert decision.risk == "DESTRUCTIVE" and decision.targets == ["staging"]
    done = await rig.task(task.id)
    assert done.actions[-1].risk is RiskClass.DESTRUCTIVE
    assert done.actions[-1].args["target"] == "staging"


async def test_an_edit_the_policy_would_block_is_refused_and_decides_nothing(
        rig: Rig) -> None:
    """staging (SEND) edited to prod (DESTRUCTIVE, prohibited) is 409; bad args are 422
    naming the argument; the request stays pending and nothing ran."""
    task = await rig.start(deploy("staging"), prohibit=("DESTRUCTIVE",))
    assert task.approval is not None
    blocked = await rig.api.post(f"/tasks/{task.id}/approve", json={"args": {"target": "prod"}})
    assert blocked.status_code == 409, blocked.text
    assert "would be blocked" in blocked.json()["detail"]
    bad = await rig.api.post(f"/approvals/{task.approval.id}/approve",
                             json={"args": {"target": 5}})
    assert bad.status_code == 422, bad.text
    assert bad.json()["detail"].startswith("args: ") and "'target'" in bad.json()["detail"]
    still = await rig.task(task.id)
    assert still.state is TaskState.WAITING_APPROVAL and rig.tools["risky"].runs == 0
    assert still.approval is not None and still.approval.status is ApprovalStatus.PENDING


async def test_an_outside_request_cannot_be_edited(rig: Rig) -> None:
    """A POST /v1/approvals request not asked "editable" runs the agent's own call: editing
    one is a clear 422."""
    asked = await rig.api.post("/v1/approvals", json={
        "tool": "notify_team", "args": {"target": "x"}, "requester": "hermes:bob",
        "policy_id": "s-1"})
    assert asked.status_code == 202, asked.text
    refused = await rig.api.post(f"/approvals/{asked.json()['id']}/approve",
                                 json={"args": {"target": "y"}})
    assert refused.status_code == 422
    assert '"editable": true' in refused.json()["detail"]
    status = await rig.api.get(f"/v1/approvals/{asked.json()['id']}")
    assert status.json()["status"] == "pending"


# --- step-up -------------------------------------------------------------------------------


async def test_step_up_cards_link_to_the_console_and_chat_clicks_decide_nothing(
        rig: Rig) -> None:
    """A DESTRUCTIVE card has only a URL button to its console page on Slack and Telegram;
    a forged decision click on either decides nothing and says where to confirm; the
    console (API key) decides."""
    task = await rig.start(deploy("prod"))
    assert task.approval is not None
    link = f"{PUBLIC}/console/cards/{task.approval.id}"
    [card] = rig.slack_cards()
    assert message_buttons(card) == ("Open in console to decide",)
    [button] = [e for b in card["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert button["url"] == link
    [tg_card] = [m for m in rig.telegram.chat_messages(CHAT) if m.reply_to is None]
    assert tg_card.keyboard == [[{"text": "Open in console to decide", "url": link}]]

    [slack_ref] = [CardRef(r.surface, r.channel, r.message_id)
                   for r in await rig.node.store.cards(task.approval.id) if r.surface == "slack"]
    payload = rig.harness.payload(slack_ref, Scope.ONCE, ALICE, approval_id=task.approval.id)
    await rig.harness.send(payload)
    outcome = await asyncio.wait_for(rig.harness.outcomes.get(), 5)
    assert not outcome.accepted and outcome.message == f"Confirm in the console: {link}"
    await rig.slack.wait_for_calls("chat.postEphemeral")
    assert rig.slack.ephemeral_texts() == [f"Confirm in the console: {link}"]

    forged = rig.telegram.callback_update(CHAT, tg_card.message_id,
                                          f"so:{task.approval.id}:o")
    rig.telegram.push_update(forged)
    toast = await rig.telegram.wait_answer(rig.telegram.query_id(forged))
    assert toast == f"Confirm in the console: {link}"
    assert (await rig.task(task.id)).state is TaskState.WAITING_APPROVAL
    assert rig.tools["risky"].runs == 0

    decided = await rig.api.post(f"/tasks/{task.id}/approve", json={"scope": "once"})
    assert decided.status_code == 200 and decided.json()["state"] == "completed"
    refusals = [e for e in await audit_log(rig.node) if e.kind == "refused"]
    assert [e.actor for e in refusals] == [f"slack:{ALICE}", "telegram:42"]


async def test_a_send_card_keeps_its_decision_buttons_under_step_up(rig: Rig) -> None:
    """Only the listed risk classes step up: a SEND card still decides in the chat."""
    task = await rig.start(deploy("staging"))
    [card] = rig.slack_cards()
    assert message_buttons(card) == ("Once", "Session", "Always", "Deny")
    assert task.approval is not None


async def test_a_held_edited_time_boxed_approval_runs_the_edit_and_boxes_the_grant(
        rig: Rig) -> None:
    """Under approvals.hold the edited action waits with its time box; on release it is the
    edited call that runs and the grant lapses "for" after the release."""
    rules = ApprovalRules(hold={RiskClass.SEND: timedelta(minutes=1)})
    rig.node.engine.config = replace(rig.node.engine.config, rules=rules)
    task = await rig.start(notify("x"))
    answer = await rig.api.post(f"/tasks/{task.id}/approve", json={
        "scope": "session", "for": "10m", "args": {"target": "y"}})
    assert answer.status_code == 200, answer.text
    assert (await rig.task(task.id)).state is TaskState.WAITING_APPROVAL  # held
    rig.clock.advance(timedelta(minutes=1))
    await rig.node.decider.release_due()
    done = await rig.task(task.id)
    assert done.state is TaskState.COMPLETED
    assert [r.args["target"] for r in done.actions] == ["y"]
    [grant] = (await rig.api.get("/grants")).json()["items"]
    assert grant["expires_at"] == (rig.clock.now() + timedelta(minutes=10)).isoformat()


async def test_a_request_under_a_quorum_cannot_be_edited(rig: Rig) -> None:
    """Every approver of a quorum must approve the same action: an edit is a 422."""
    rules = ApprovalRules(quorum={"team.notify": 2})
    rig.node.engine.config = replace(rig.node.engine.config, rules=rules)
    task = await rig.start(notify("x"))
    refused = await rig.api.post(f"/tasks/{task.id}/approve", json={"args": {"target": "y"}})
    assert refused.status_code == 422
    assert "needs 2 approvals cannot be edited" in refused.json()["detail"]
