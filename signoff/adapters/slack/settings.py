"""The ``[slack]`` config section: approval cards and notifications in Slack.

Imported with the config file, so it imports no Slack SDK: the surface is built from it
by `signoff.adapters.slack.PLUGIN`.
"""

from __future__ import annotations

import enum
from typing import Self

from pydantic import field_validator, model_validator

from signoff.sections import NonEmpty, Section, problem

__all__ = ["SlackMode", "SlackSettings"]


class SlackMode(enum.StrEnum):
    """Socket Mode (no public URL needed) or HTTP events on /slack/events."""

    SOCKET = "socket"
    HTTP = "http"


class SlackSettings(Section):
    """[slack]: approval cards and notifications in Slack."""

    mode: SlackMode = SlackMode.SOCKET
    bot_token: NonEmpty
    app_token: str | None = None
    signing_secret: str | None = None
    channel: NonEmpty
    api_url: str = "https://slack.com/api/"

    @field_validator("api_url")
    @classmethod
    def _slash(cls, value: str) -> str:
        # slack_sdk joins method names onto base_url, so the slash must be there.
        return value if value.endswith("/") else value + "/"

    @model_validator(mode="after")
    def _mode_needs(self) -> Self:
        if self.mode is SlackMode.SOCKET:
            if not self.app_token:
                raise problem("app_token", "required in socket mode (an 'xapp-...' token)")
            if not self.app_token.startswith("xapp-"):
                raise problem("app_token", "must be an app-level token starting with 'xapp-'")
        if self.mode is SlackMode.HTTP and not self.signing_secret:
            raise problem("signing_secret", "required in http mode")
        return self
