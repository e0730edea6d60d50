"""The ``[telegram]`` config section: approval cards and notifications in Telegram.

Imported with the config file, so it imports no Telegram SDK: the surface is built from
it by `signoff.adapters.telegram.PLUGIN`.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Self

from pydantic import BeforeValidator, Field, field_validator, model_validator

from signoff.sections import NonEmpty, Section, problem

__all__ = ["ChatId", "TelegramMode", "TelegramSettings"]


class TelegramMode(enum.StrEnum):
    """Long polling (no public URL needed) or a webhook on /telegram/webhook."""

    POLLING = "polling"
    WEBHOOK = "webhook"


def _chat_id(value: object) -> object:
    # Telegram chat ids are numbers but "@channelname" is valid too: keep one type, str.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


ChatId = Annotated[str, BeforeValidator(_chat_id), Field(min_length=1)]


class TelegramSettings(Section):
    """[telegram]: approval cards and notifications in Telegram."""

    mode: TelegramMode = TelegramMode.POLLING
    bot_token: NonEmpty
    chat_id: ChatId
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    webhook_secret: str | None = None
    webhook_url: str | None = None

    @field_validator("webhook_secret")
    @classmethod
    def _secret_charset(cls, value: str | None) -> str | None:
        # Telegram's setWebhook refuses other secrets; fail at startup, not at first use.
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", value):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, '_' and '-'")
        return value

    @model_validator(mode="after")
    def _mode_needs(self) -> Self:
        if self.mode is TelegramMode.WEBHOOK and not self.webhook_secret:
            raise problem("webhook_secret", "required in webhook mode")
        return self
