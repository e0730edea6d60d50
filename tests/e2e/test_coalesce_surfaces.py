"""Coalescing through the whole daemon with the Slack and Telegram fakes: three identical
requests are one card on each surface, and one click there decides all three."""

from __future__ import annotations

from typing import Any

from tests.e2e import test_daemon_surfaces as surfaces
from tests.e2e.test_daemon_surfaces import CHAT, Running, until
from tests.fakes.slack_api import (
    APPROVALS,
    SECRET,
    block_actions_payload,
    find_button,
    message_text,
    signed_interaction,
)
from tests.fakes.telegram_api import user

daemon = surfaces.daemon  # the same fixture: Slack (http) and Telegram (polling) fakes
STEP = [{"tool": "run_command", "args": {"command": "true"}}]  # DESTRUCTIVE: asks


async def three_waiting(daemon: Running) -> list[str]:
    tasks = []
    for n in range(3):
        answer = await daemon.http.post("/tasks", json={"goal": f"run true {n}",
                                                        "steps": STEP})
        tasks.append(answer.json()["id"])
    for task_id in tasks:
        async def waits(t: str = task_id) -> bool:
            return (await daemon.task(t))["state"] == "waiting_approval"
        await until(waits, f"{task_id} to wait")
    return tasks


def slack_cards(daemon: Running) -> list[tuple[str, dict[str, Any]]]:
    return [(ts, m) for (ch, ts), m in daemon.slack.messages.items() if ch == APPROVALS]


async def shows_three(daemon: Running) -> None:
    """Exactly one card on each surface, edited to say it stands for three requests."""
    async def shown() -> bool:
        cards = slack_cards(daemon)
        tg = daemon.telegram.chat_messages(CHAT)
        return (len(cards) == 1 and "3 identical requests" in message_text(cards[0][1])
                and len(tg) == 1 and "3 identical requests" in tg[0].text)
    await until(shown, "one card saying 3 identical requests on Slack and Telegram")


async def all_completed(daemon: Running, tasks: list[str]) -> None:
    async def done() -> bool:
        states = [(await daemon.task(t))["state"] for t in tasks]
        return states == ["completed"] * len(tasks)
    await until(done, "every task to complete")


async def decisions(daemon: Running) -> list[dict[str, Any]]:
    events = (await daemon.http.get("/audit", params={"limit": 500})).json()["items"]
    return [e for e in events if e["kind"] == "decision"]


async def test_one_slack_click_on_the_shared_card_decides_all_three(daemon: Running) -> None:
    """Session on Slack: all three tasks run, each audited as slack:U0ALICE, each with its
    own session grant; both cards show the outcome."""
    tasks = await three_waiting(daemon)
    await shows_three(daemon)
    ((ts, message),) = slack_cards(daemon)
    (card,) = daemon.telegram.chat_messages(CHAT)
    button = find_button(message, "signoff_session")
    assert button is not None
    payload = block_actions_payload(channel=APPROVALS, message_ts=ts, action_id="signoff_session",
                                    value=str(button["value"]), user_id="U0ALICE",
                                    message=message)
    body, headers = signed_interaction(SECRET, payload)
    assert (await daemon.http.post("/slack/events", content=body, headers=headers)
            ).status_code == 200
    await all_completed(daemon, tasks)
    decided = await decisions(daemon)
    assert sorted(e["task_id"] for e in decided) == sorted(tasks)
    assert {(e["actor"], e["scope"]) for e in decided} == {("slack:U0ALICE", "session")}
    grants = (await daemon.http.get("/grants")).json()["items"]
    assert sorted(g["policy_id"] for g in grants if g["scope"] == "session") == sorted(tasks)

    async def edited() -> bool:  # (a reply under the card follows: read the card itself)
        tg = daemon.telegram.message(CHAT, card.message_id)
        return ("Approved for this session by alice" in str(daemon.slack.message(
            APPROVALS, ts)) and tg.labels == ()
            and "Approved for this session by alice" in tg.text)  # her Slack name
    await until(edited, "both cards to show the outcome")


async def test_one_telegram_tap_on_the_shared_card_decides_all_three(daemon: Running) -> None:
    """Once from Telegram: all three tasks run, each audited as telegram:42."""
    tasks = await three_waiting(daemon)
    await shows_three(daemon)
    (card,) = daemon.telegram.chat_messages(CHAT)
    tap = daemon.telegram.push_update(daemon.telegram.tap(CHAT, card.message_id, "Once",
                                                          sender=user(42, "bob", "Bob")))
    toast = await daemon.telegram.wait_answer(daemon.telegram.query_id(tap))
    assert toast == "Approved once"
    await all_completed(daemon, tasks)
    decided = await decisions(daemon)
    assert sorted(e["task_id"] for e in decided) == sorted(tasks)
    assert {(e["actor"], e["scope"]) for e in decided} == {("telegram:42", "once")}
