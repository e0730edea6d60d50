"""Log lines carry their ids as key=value after the event name."""

from __future__ import annotations

import logging

from signoff.logs import KeyValueFormatter


def test_extras_follow_the_event_name() -> None:
    """`extra=` fields are printed as key=value; values with spaces are quoted."""
    record = logging.LogRecord("signoff.x", logging.INFO, __file__, 1, "schedule_skipped",
                               None, None)
    record.schedule = "nightly"
    record.reason = "still running"
    line = KeyValueFormatter("%(levelname)s %(message)s").format(record)
    assert line == 'INFO schedule_skipped schedule=nightly reason="still running"'


def test_a_plain_line_stays_plain() -> None:
    """Without extras nothing is appended."""
    record = logging.LogRecord("signoff.x", logging.INFO, __file__, 1, "started", None, None)
    assert KeyValueFormatter("%(message)s").format(record) == "started"
