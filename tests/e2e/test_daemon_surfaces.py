"""The whole daemon, wired from a config file, with Slack (http mode) and Telegram
(polling) pointed at local fakes: one request reaches every surface, the first valid
answer wins, every copy is edited, the team channel hears about it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.config.settings import Settings
from signoff.runtime.daemon import Daemon
from signoff.wiring.daemon import assemble
from tests.fakes.slack_api import (
    APPROVALS,
    BOT_TOKEN,
    SECRET,
    FakeSlack,
    block_actions_payload,
    find_button,
    sign,
    signed_interaction,
)
from tests.fakes.telegram_api import FakeTelegramApi, user

CHAT = "-1001234567890"
TEAM = "C0TEAM"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def until(check: Any, what: str, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)


class Running:
    """A daemon running in this event loop, reachable over real HTTP."""

    def __init__(self, url: str, slack: FakeSlack, telegram: FakeTelegramApi) -> None:
        self.url, self.slack, self.telegram = url, slack, telegram
        self.http = httpx.AsyncClient(base_url=url, timeout=10)

    async def task(self, task_id: str) -> dict[str, Any]:
        return dict((await self.http.get(f"/tasks/{task_id}")).json())


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Running]:
    """Slack + Telegram fakes and a daemon configured for both, started and stopped."""
    async with FakeSlack() as slack, FakeTelegramApi() as telegram:
        work = tmp_path / "work"
        work.mkdir()
        (work / "old.txt").write_text("old")
        settings = Settings.model_validate({
            "daemon": {"work_dir": str(work)},
            "approvals": {"approvers": ["slack:U0ALICE", "telegram:42"]},
            "slack": {"mode": "http", "bot_token": BOT_TOKEN, "signing_secret": SECRET,
                      "channel": APPROVALS, "api_url": slack.api_url},
            "telegram": {"mode": "polling", "bot_token": telegram.token, "chat_id": CHAT,
                         "base_url": telegram.base_url, "base_file_url": telegram.base_file_url},
            "notify": [{"channel": f"slack:{TEAM}", "events": ["waiting_approval", "completed"]}],
        })
        port = free_port()
        node, services = await assemble(settings, host="127.0.0.1", port=port, work_dir=None,
                                        database=None, autonomous_risks=None)
        assert set(node.surfaces) == {"web", "slack", "telegram"}
        daemon = Daemon(engine=node.engine, worker=node.worker, decider=node.decider,
                        services=services)
        run = asyncio.create_task(daemon.run())
        running = Running(f"http://127.0.0.1:{port}", slack, telegram)

        async def healthy() -> bool:
            try:
                return (await running.http.get("/health")).status_code == 200
            except httpx.HTTPError:
                return False

        await until(healthy, "the daemon")
        await telegram.wait_call("getUpdates")
        yield running
        await running.http.aclose()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_one_request_everywhere_and_the_first_valid_answer_wins(daemon: Running) -> None:
    """A card on Slack and Telegram; a stranger's tap is refused; Alice's click decides."""
    slack, telegram = daemon.slack, daemon.telegram
    r = await daemon.http.post("/tasks", json={
        "goal": "clean up", "steps": [{"tool": "delete_file", "args": {"path": "old.txt"}}]})
    task_id = r.json()["id"]
    await slack.wait_for_calls("chat.postMessage")
    await telegram.wait_call("sendMessage")
    (card_call,) = [c for c in slack.calls_to("chat.postMessage") if c.body["channel"] == APPROVALS]
    ts = next(ts for (ch, ts) in slack.messages if ch == APPROVALS)
    tg_card = telegram.chat_messages(CHAT)[-1]
    assert tg_card.labels == ("Once", "Session", "Always", "Deny")
    once = dict(tg_card.buttons)["Once"]  # a stale client may still show it after the edit

    stranger = telegram.push_update(telegram.tap(CHAT, tg_card.message_id, "Once",
                                                 sender=user(999, "mallory", "Mallory")))
    toast = await telegram.wait_answer(telegram.query_id(stranger))
    assert toast is not None and "Not authorized" in toast
    assert (await daemon.task(task_id))["state"] == "waiting_approval"

    message = slack.message(APPROVALS, ts)
    button = find_button(message, "signoff_session")
    assert button is not None
    payload = block_actions_payload(channel=APPROVALS, message_ts=ts, action_id="signoff_session",
                                    value=str(button["value"]), user_id="U0ALICE",
                                    message=message)
    body, headers = signed_interaction(SECRET, payload)
    answer = await daemon.http.post("/slack/events", content=body, headers=headers)
    assert answer.status_code == 200

    async def completed() -> bool:
        return (await daemon.task(task_id))["state"] == "completed"

    await until(completed, "the task to complete")
    await slack.wait_for_calls("chat.update")
    await telegram.wait_call("editMessageText")
    edited = telegram.message(CHAT, tg_card.message_id)
    assert "Approved for this session by alice" in edited.text  # her Slack name
    assert edited.labels == ()
    assert "Approved for this session by alice" in str(slack.message(APPROVALS, ts))

    late = telegram.push_update(telegram.callback_update(CHAT, tg_card.message_id, once,
                                                         sender=user(42, "bob", "Bob")))
    toast = await telegram.wait_answer(telegram.query_id(late))
    assert toast is not None and "Already decided by slack:U0ALICE" in toast

    async def team_heard() -> bool:
        return any("completed" in t for t in slack.posted_texts(TEAM))

    await until(team_heard, "the team channel to hear about it")
    audit = (await daemon.http.get("/audit", params={"task": task_id})).json()["items"]
    actors = [(e["kind"], e["actor"]) for e in audit]
    assert ("refused", "telegram:999") in actors
    assert ("decision", "slack:U0ALICE") in actors
    assert ("refused", "telegram:42") in actors
    assert card_call.body["text"]


async def test_signed_malformed_slack_bodies_get_400_from_the_daemon(daemon: Running) -> None:
    """Through the daemon's own HTTP app, signed bodies bolt cannot read are 400, not 500;
    one nested past the daemon's JSON bound is refused before bolt sees it (422)."""
    for raw, status in (("[" * 100_000, 422), ('{"type": "block_actions", "actions": []}', 400),
                        ('{"type": "block_actions", "user": 5, "actions": '
                         '[{"action_id": "signoff_once"}]}', 400)):
        body = raw.encode()
        headers = {**sign(SECRET, body), "Content-Type": "application/json"}
        answer = await daemon.http.post("/slack/events", content=body, headers=headers)
        assert answer.status_code == status, (raw[:40], answer.status_code)
    assert (await daemon.http.get("/health")).status_code == 200


async def test_a_rejected_slack_token_leaves_the_other_surfaces_working(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """invalid_auth at start-up: Slack is left out with a clear log line; the rest runs."""
    async with FakeSlack(invalid_auth=True) as slack:
        settings = Settings.model_validate({
            "daemon": {"work_dir": str(tmp_path / "work")},
            "slack": {"mode": "http", "bot_token": BOT_TOKEN, "signing_secret": SECRET,
                      "channel": APPROVALS, "api_url": slack.api_url}})
        with caplog.at_level("ERROR"):
            node, services = await assemble(settings, host="127.0.0.1", port=free_port(),
                                            work_dir=None, database=None,
                                            autonomous_risks=None)
        assert set(node.surfaces) == {"web"}
        assert any("surface_disabled surface=slack" in r.getMessage() and
                   "slack.bot_token" in r.getMessage() for r in caplog.records)
        assert "surface-web" in [name for name, _ in services]
        await node.store.close()


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[Any, Running]]:
    """Assemble and run a daemon for ``settings``; yield its node and a client."""
    port = free_port()
    node, services = await assemble(settings, host="127.0.0.1", port=port, work_dir=None,
                                    database=None, autonomous_risks=None)
    daemon = Daemon(engine=node.engine, worker=node.worker, decider=node.decider,
                    services=services)
    run = asyncio.create_task(daemon.run())
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10)

    async def healthy() -> bool:
        try:
            return (await client.get("/health")).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        await until(healthy, "the daemon")
        yield node, client
    finally:
        await client.aclose()
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


async def test_a_failing_slack_start_is_retried_while_the_other_surfaces_run(
        tmp_path: Path) -> None:
    """auth.test answers 500 at start: Slack is degraded on /health, Telegram gets the card,
    Slack's waits; once Slack answers again the card is posted there too."""
    async with FakeSlack() as slack, FakeTelegramApi() as telegram:
        slack.fail_next("auth.test", 10_000, status=500)
        work = tmp_path / "work"
        work.mkdir()
        (work / "old.txt").write_text("old")
        settings = Settings.model_validate({
            "daemon": {"work_dir": str(work)},
            "approvals": {"approvers": ["slack:U0ALICE"]},
            "slack": {"mode": "http", "bot_token": BOT_TOKEN, "signing_secret": SECRET,
                      "channel": APPROVALS, "api_url": slack.api_url},
            "telegram": {"mode": "polling", "bot_token": telegram.token, "chat_id": CHAT,
                         "base_url": telegram.base_url,
                         "base_file_url": telegram.base_file_url}})
        async with serving(settings) as (node, http):
            assert "slack" in node.surfaces
            surfaces = (await http.get("/health")).json()["surfaces"]
            assert surfaces["slack"].startswith("degraded: slack auth.test")
            assert (surfaces["telegram"], surfaces["web"]) == ("ok", "ok")
            await http.post("/tasks", json={"goal": "clean up", "steps": [
                {"tool": "delete_file", "args": {"path": "old.txt"}}]})
            await telegram.wait_call("sendMessage")
            assert slack.calls_to("chat.postMessage") == []
            slack.clear_faults("auth.test")

            async def slack_back() -> bool:
                health = (await http.get("/health")).json()["surfaces"]
                return health["slack"] == "ok" and bool(slack.calls_to("chat.postMessage"))

            await until(slack_back, "Slack to recover and get its card", timeout=30)
            [card] = slack.calls_to("chat.postMessage")
            assert card.body["channel"] == APPROVALS


async def test_health_says_a_surface_with_a_refused_token_is_disabled_and_why(
        tmp_path: Path) -> None:
    """invalid_auth at start: /health shows Slack disabled with the reason, and the node
    is "degraded" (it still serves), naming the surface in its problems."""
    async with FakeSlack(invalid_auth=True) as slack:
        settings = Settings.model_validate({
            "daemon": {"work_dir": str(tmp_path / "work")},
            "slack": {"mode": "http", "bot_token": BOT_TOKEN, "signing_secret": SECRET,
                      "channel": APPROVALS, "api_url": slack.api_url}})
        async with serving(settings) as (_, http):
            body = (await http.get("/health")).json()
        assert body["status"] == "degraded"
        assert any(p.startswith("surface slack: disabled") for p in body["problems"])
        assert body["surfaces"]["web"] == "ok"
        assert body["surfaces"]["slack"].startswith("disabled: slack auth.test: invalid_auth")
        assert "slack.bot_token" in body["surfaces"]["slack"]


OUTSIDE = {"tool": "run_command", "args": {"command": "git push origin main", "cwd": "/srv/app"},
           "requester": "hermes:alice@laptop", "policy_id": "hermes-s-9",
           "why": "ship the release"}


async def test_a_slack_click_decides_an_outside_request(daemon: Running) -> None:
    """An outside agent's request is a card on Slack naming the requester and why; Alice's
    click approves it, the agent's long poll hears it, and the card is edited."""
    slack = daemon.slack
    r = await daemon.http.post("/v1/approvals", json=OUTSIDE)
    assert r.status_code == 202, r.text
    approval_id = r.json()["id"]
    waiting = asyncio.create_task(daemon.http.get(f"/v1/approvals/{approval_id}",
                                                  params={"wait": "30s"}, timeout=60))
    await slack.wait_for_calls("chat.postMessage")
    ts = next(ts for (ch, ts) in slack.messages if ch == APPROVALS)
    message = slack.message(APPROVALS, ts)
    shown = str(message)
    assert "hermes:alice@laptop" in shown and "ship the release" in shown
    assert "hermes-s-9" in shown and "git push origin main" in shown
    button = find_button(message, "signoff_once")
    assert button is not None and button["value"] == approval_id
    payload = block_actions_payload(channel=APPROVALS, message_ts=ts, action_id="signoff_once",
                                    value=str(button["value"]), user_id="U0ALICE",
                                    message=message)
    body, headers = signed_interaction(SECRET, payload)
    assert (await daemon.http.post("/slack/events", content=body, headers=headers)
            ).status_code == 200
    answer = (await waiting).json()
    assert answer["status"] == "approved" and answer["decided_by"] == "slack:U0ALICE"
    await slack.wait_for_calls("chat.update")

    async def edited() -> bool:
        return "Approved once by alice" in str(slack.message(APPROVALS, ts))

    await until(edited, "the Slack card to show the outcome")


async def test_a_telegram_tap_decides_an_outside_request(daemon: Running) -> None:
    """The same request on Telegram: a stranger's tap is refused, Bob's Deny decides it."""
    telegram = daemon.telegram
    r = await daemon.http.post("/v1/approvals", json={**OUTSIDE, "policy_id": "hermes-s-10"})
    approval_id = r.json()["id"]
    await telegram.wait_call("sendMessage")
    card = telegram.chat_messages(CHAT)[-1]
    assert "hermes:alice@laptop" in card.text and "ship the release" in card.text
    assert card.labels == ("Once", "Session", "Always", "Deny")
    stranger = telegram.push_update(telegram.tap(CHAT, card.message_id, "Deny",
                                                 sender=user(999, "mallory", "Mallory")))
    toast = await telegram.wait_answer(telegram.query_id(stranger))
    assert toast is not None and "Not authorized" in toast
    tap = telegram.push_update(telegram.tap(CHAT, card.message_id, "Deny",
                                            sender=user(42, "bob", "Bob")))
    await telegram.wait_answer(telegram.query_id(tap))
    status = (await daemon.http.get(f"/v1/approvals/{approval_id}")).json()
    assert status["status"] == "denied" and status["decided_by"] == "telegram:42"
    await telegram.wait_call("editMessageText")
    edited = telegram.message(CHAT, card.message_id)
    assert "Denied by bob" in edited.text and edited.labels == ()  # his Telegram name
