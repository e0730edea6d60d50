"""The ``[ntfy]`` config section. Imported with the config file: it imports no SDK."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, field_validator

from signoff.runtime.models import Risk, RiskClass
from signoff.sections import NonEmpty, Section

__all__ = ["TOPIC", "NtfySettings"]

TOPIC = r"[A-Za-z0-9_-]{1,64}"  # ntfy's own rule for topic names


class NtfySettings(Section):
    """[ntfy]: one message per request on one topic of an ntfy server."""

    url: NonEmpty = "https://ntfy.sh"
    topic: str = Field(pattern=f"^{TOPIC}$")
    token: NonEmpty | None = None  # an access token (tk_…) or password, sent as Bearer
    # Risk classes whose messages carry Once and Deny (the others carry Open only).
    actions_for: list[Risk] = Field(default_factory=lambda: [RiskClass.SEND])
    timeout: timedelta = timedelta(seconds=10)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be the ntfy server's URL, such as 'https://ntfy.sh'")
        return value.rstrip("/")
