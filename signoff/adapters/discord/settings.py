"""The ``[discord]`` config section: approval cards and notifications in a Discord channel.

Imported with the config file, so it imports nothing of the surface, which is built
from it by `signoff.adapters.discord.PLUGIN`.
"""

from __future__ import annotations

import re

from pydantic import field_validator

from signoff.sections import NonEmpty, Section

__all__ = ["DEFAULT_API_BASE", "DiscordSettings"]

DEFAULT_API_BASE = "https://discord.com/api/v10"
_SNOWFLAKE = re.compile(r"\d{1,20}")
_PUBLIC_KEY = re.compile(r"[0-9a-fA-F]{64}")


def _snowflake(value: object) -> object:
    # Ids are 64-bit numbers; a TOML integer is accepted and kept as the string Discord uses.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class DiscordSettings(Section):
    """[discord]: approval cards in one channel, clicks at ``POST /discord/interactions``."""

    application_id: str
    public_key: str
    bot_token: NonEmpty
    channel_id: str
    api_base: str = DEFAULT_API_BASE

    @field_validator("application_id", "channel_id", mode="before")
    @classmethod
    def _ids(cls, value: object) -> object:
        value = _snowflake(value)
        if isinstance(value, str) and not _SNOWFLAKE.fullmatch(value):
            raise ValueError("must be a Discord id (a snowflake: digits only, such as "
                             "'1234567890123456789'; Developer Mode → Copy ID)")
        return value

    @field_validator("public_key")
    @classmethod
    def _key(cls, value: str) -> str:
        # The application's Ed25519 verify key as the Developer Portal shows it.
        if not _PUBLIC_KEY.fullmatch(value):
            raise ValueError("must be the application's public key: 64 hexadecimal characters "
                             "(Developer Portal → General Information → Public Key)")
        return value.lower()

    @field_validator("api_base")
    @classmethod
    def _base(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL such as 'https://discord.com/api/v10'")
        return value.rstrip("/")
