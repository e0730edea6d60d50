"""The ``[webpush]`` config section. Imported with the config file: it imports no SDK."""

from __future__ import annotations

from pydantic import Field, field_validator

from signoff.runtime.models import Risk, RiskClass
from signoff.sections import NonEmpty, Section

__all__ = ["WebPushSettings"]


class WebPushSettings(Section):
    """[webpush]: notifications to the browsers people enabled in the console."""

    enabled: bool = False
    # Risk classes whose notifications carry Once and Deny (the others carry Open only).
    actions_for: list[Risk] = Field(default_factory=lambda: [RiskClass.SEND])
    # The VAPID "sub" claim push services may write to (mailto: or https:); None: the
    # daemon's public_url when it is https, else mailto:signoff@localhost.
    subject: NonEmpty | None = None
    # Endpoints are https (every browser's push service); http only for a local one.
    insecure_endpoints: bool = False

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("mailto:", "https://")):
            raise ValueError("must be a mailto: or https: URL that push services may "
                             "write to, such as 'mailto:ops@example.com'")
        return value
