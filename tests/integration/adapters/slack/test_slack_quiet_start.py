"""The Slack surface starts without a warning of ours in the log."""

from __future__ import annotations

import logging

import pytest

from signoff.adapters.slack import SlackSurface
from tests.fakes.slack_api import APPROVALS, BOT_TOKEN, SECRET, FakeSlack


async def test_no_token_unused_warning_when_the_token_is_in_the_environment(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """With SLACK_BOT_TOKEN set (as the documented config reads it), building and checking
    the Slack surface logs no "token will be unused" warning from slack-bolt."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    caplog.set_level(logging.WARNING)
    async with FakeSlack() as fake:
        platform = SlackSurface(bot_token=BOT_TOKEN, channel=APPROVALS, mode="http",
                                 signing_secret=SECRET, api_url=fake.api_url)
        await platform.check()
    assert not [r for r in caplog.records if "will be unused" in r.getMessage()]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
