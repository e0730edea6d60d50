"""`post_message` in the whole daemon: approved posts reach Slack and Telegram through the
surfaces' own notify path; a channel no surface reaches fails before any card is posted."""

from __future__ import annotations

from typing import Any

from tests.e2e.test_daemon_surfaces import Running, daemon, until
from tests.fakes.slack_api import APPROVALS

__all__ = ["daemon"]  # the fixture, shared with the surfaces test

NEWS = "C0NEWS"
NEWS_CHAT = "-1009876543210"


async def _approve_current(running: Running, task_id: str) -> None:
    async def waiting() -> bool:
        return (await running.task(task_id))["state"] == "waiting_approval"

    await until(waiting, "the approval request")
    answer = await running.http.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
    assert answer.status_code == 200, answer.text


async def test_approved_posts_reach_slack_and_telegram(daemon: Running) -> None:
    """Approving each post_message sends chat.postMessage / sendMessage with the text."""
    slack, telegram = daemon.slack, daemon.telegram
    slack.channels.add(NEWS)
    r = await daemon.http.post("/tasks", json={"goal": "announce", "steps": [
        {"tool": "post_message", "args": {"channel": f"slack:{NEWS}", "text": "v2 is out"}},
        {"tool": "post_message", "args": {"channel": f"telegram:{NEWS_CHAT}",
                                          "text": "v2 is out (tg)"}}]})
    task_id = r.json()["id"]
    await _approve_current(daemon, task_id)

    async def posted_on_slack() -> bool:
        return "v2 is out" in slack.posted_texts(NEWS)

    await until(posted_on_slack, "the Slack post")
    await _approve_current(daemon, task_id)

    async def completed() -> bool:
        return (await daemon.task(task_id))["state"] == "completed"

    await until(completed, "the task to complete")
    assert [m.text for m in telegram.chat_messages(NEWS_CHAT)] == ["v2 is out (tg)"]
    outputs = (await daemon.task(task_id))["result"]["outputs"]
    assert [o["output"]["channel"] for o in outputs] == [f"slack:{NEWS}",
                                                         f"telegram:{NEWS_CHAT}"]


async def test_an_unreachable_channel_fails_without_a_card(daemon: Running) -> None:
    """post_message to a surface that is not configured fails at once: no card anywhere."""
    r = await daemon.http.post("/tasks", json={"goal": "announce", "steps": [
        {"tool": "post_message", "args": {"channel": "irc:123", "text": "hi"}}]})
    task_id = r.json()["id"]

    async def failed() -> bool:
        return (await daemon.task(task_id))["state"] == "failed"

    await until(failed, "the task to fail")
    task: dict[str, Any] = await daemon.task(task_id)
    assert "names no chat surface" in task["result"]["reason"]
    assert task["approval"] is None
    assert not [c for c in daemon.slack.calls_to("chat.postMessage")
                if c.body.get("channel") == APPROVALS]
    audit = (await daemon.http.get("/audit", params={"task": task_id})).json()["items"]
    assert [(e["decision"], e["actor"]) for e in audit] == [("BLOCK", "auto:check")]
