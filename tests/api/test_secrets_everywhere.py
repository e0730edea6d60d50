"""A URL's secret is masked wherever people see it, not only in JSON answers: the console's
task page (result, targets, history), the daemon's log lines (httpx's request lines
included) and the team channel's lines."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from signoff.logs import handler
from signoff.runtime.text import MASK
from signoff.testing import RecordingSurface
from tests.api.helpers import eventually, make_settings, running_node, wait_state
from tests.fakes.http_echo import HttpEcho

SECRET = "s3cr3t-t0ken"


@pytest.fixture
def daemon_log() -> Iterator[io.StringIO]:
    """The daemon's own log handler (`signoff.logs.handler`) on the root logger at INFO,
    writing to a buffer, as `signoff daemon start` sets it up."""
    stream = io.StringIO()
    root = logging.getLogger()
    ours, level = handler(stream), root.level
    root.addHandler(ours)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(ours)
        root.setLevel(level)


async def test_console_log_and_team_channel_never_show_the_token(
        tmp_path: Path, echo: HttpEcho, daemon_log: io.StringIO) -> None:
    """A task whose step targets ``…?token=SECRET``: its console page, the daemon's log
    (httpx logs the request's URL) and every team-channel line show ``token=•••``."""
    team = RecordingSurface(name="slack", channel_prefix="slack")
    settings = make_settings(
        tmp_path, slack={"bot_token": "xoxb-test", "app_token": "xapp-test",
                         "channel": "C-approvals"},
        notify=[{"channel": "slack:C-team", "events": [
            "waiting_approval", "approved", "completed", "failed"]}])
    url = echo.url(f"/hook?token={SECRET}")
    async with running_node(tmp_path, settings=settings,
                            surfaces={"slack": team}) as node, node.client() as client:
        created = await client.post("/tasks", json={"goal": f"ping {url}", "steps": [
            {"tool": "send_webhook", "args": {"url": url, "payload": {"n": 1}}}]})
        task_id = created.json()["id"]
        await wait_state(client, task_id, "waiting_approval")
        approved = await client.post(f"/tasks/{task_id}/approve", json={"scope": "once"})
        assert approved.status_code == 200, approved.text
        await wait_state(client, task_id, "completed")
        assert [r.path for r in echo.requests] == ["/hook"]  # the real URL was called

        page = (await client.get(f"/console/tasks/{task_id}")).text
        assert echo.url(f"/hook?token={MASK}") in page
        assert SECRET not in page

        notifier = node.node.flow.notifier
        assert notifier is not None
        await notifier.flush(force=True)

        async def told() -> bool:  # the channel's line, not the reply under the card
            return any("completed" in text for _, text, thread in team.notes if thread is None)

        await eventually(told, 10.0, "the team channel to hear of the completed task")
        lines = [text for _, text, _ in team.notes]
        assert any(f"token={MASK}" in line for line in lines), lines
        assert not any(SECRET in line for line in lines), lines

    # The webhook receiver's own access lines (aiohttp.access) are the far end's log, not
    # the daemon's: left out.
    log = "\n".join(line for line in daemon_log.getvalue().splitlines()
                    if " aiohttp.access " not in line)
    assert "HTTP Request: POST" in log and f"token={MASK}" in log
    assert SECRET not in log
