"""The e-mail surface's settings: made by the config from ``[email]`` and ``[approvals]``.

The file has no ``[email]`` surface section of its own: ``[email]`` is the SMTP server
send_email already uses, and ``approvals.email_to`` says who gets the cards. When both
are set, `signoff.config.settings` builds this model from them (and ``daemon.public_url``,
where the links point; without it, the address the daemon listens on), and the daemon
runs the surface. Imported with the
config file, so it imports nothing heavy.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator, Field

from signoff.sections import NonEmpty, Section

__all__ = ["ADDRESS", "EmailAddress", "EmailSurfaceSettings"]

# A bare address as approver ids and ``email_to`` write it: lowercase, so that the actor
# ``email:<address>`` of a link always matches the approvers list character for character.
ADDRESS = r"[a-z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?"


def _address(value: str) -> str:
    text = value.strip().lower()
    if not re.fullmatch(ADDRESS, text):
        raise ValueError(f"invalid e-mail address {value!r} (expected a bare address such "
                         "as 'alice@example.com')")
    return text


EmailAddress = Annotated[str, AfterValidator(_address)]
"""A bare address, lowercased (``email_to``; its approver is ``email:<address>``)."""


class EmailSurfaceSettings(Section):
    """Who gets the cards, through which SMTP server, and where the links lead."""

    to: list[EmailAddress] = Field(min_length=1)
    # Base of the links, e.g. https://signoff.example.com; None: the daemon's own address.
    public_url: NonEmpty | None = None
    host: str = "localhost"
    port: int = Field(default=25, ge=1, le=65535)
    sender: str = "signoff@localhost"
    starttls: bool = False
    username: str | None = None
    password: str | None = None
    timeout: timedelta = timedelta(seconds=30)
