"""Log lines carry their ids as key=value after the event name, and show URLs masked."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from signoff.logs import KeyValueFormatter, handler


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


def test_every_line_of_the_daemon_handler_is_masked() -> None:
    """A library's line with a URL in its args, an extra, a traceback: the secret and a
    bidi override never reach the log as they are."""
    stream = io.StringIO()
    log = logging.getLogger("test.masked.lines")
    log.propagate = False
    log.setLevel(logging.INFO)  # whatever level an earlier test left on the root
    log.addHandler(handler(stream))
    try:
        log.warning("HTTP Request: %s %s", "GET", "https://h/p?token=SECRET1")
        log.warning("fetched", extra={"url": "https://bob:SECRET2@h/", "note": "a\u202eb"})
        try:
            raise ValueError("cannot reach https://h/?sig=SECRET3")
        except ValueError:
            log.exception("failed")
    finally:
        log.handlers.clear()
    text = stream.getvalue()
    assert "HTTP Request: GET https://h/p?token=•••" in text
    assert "url=https://•••@h/" in text and "note=a[U+202E]b" in text
    assert "ValueError: cannot reach https://h/?sig=•••" in text
    assert "SECRET" not in text and "\u202e" not in text


def test_the_daemon_handler_writes_to_stderr_as_it_is_now(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that swaps ``sys.stderr`` after logging was set up (and closes the old one)
    gets the next line on the new stream, not a logging error about a closed file."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    out = handler()
    log = logging.getLogger("test.stderr.now")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(out)
    try:
        log.info("before")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        log.info("after")
    finally:
        log.handlers.clear()
    assert "after" in second.getvalue() and "Logging error" not in second.getvalue()
