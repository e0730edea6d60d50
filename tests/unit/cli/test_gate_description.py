"""What `signoff mcp-gate` sends as a request's ``description``: the upstream's words as
the daemon takes them (`api.schemas.RequestIn`), so a long or odd description never
turns a call into a 422 the client reads as a refusal."""

from __future__ import annotations

import re

from signoff.api.schemas import DESCRIPTION_TEXT
from signoff.runtime.tools.base import DESCRIPTION_MAX, told


def test_the_upstreams_description_is_sent_as_the_daemon_takes_it() -> None:
    """Its first 1,000 characters, control characters but tab and line breaks left out;
    none for a description that is empty or only whitespace."""
    said = "Delete\x1b[2K the path.\r\n\tRecursively.\x7f " + "x" * 5_000
    sent = told(said)
    assert sent is not None and sent.startswith("Delete[2K the path.\r\n\tRecursively. ")
    assert len(sent) == DESCRIPTION_MAX and re.fullmatch(DESCRIPTION_TEXT, sent)
    assert told("Look at a path.") == "Look at a path."
    assert told("") is None and told(None) is None and told(" \n\x00") is None
