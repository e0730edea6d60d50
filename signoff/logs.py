"""Log lines for people and grep: ``time level logger event key=value …``.

Code logs a stable snake_case event name and puts ids in ``extra=``; this formatter
prints those extras after the event, so ``schedule_skipped schedule=nightly task_id=t-…``
is one greppable line. Tokens and message bodies are never passed in extras.

Every record that reaches the handler passes `MaskUrls` first — ours and every
library's (httpx logs each request's full URL at INFO, ``?token=…`` included): URLs are
masked and invisible characters escaped the way every other surface shows them
(`signoff.runtime.text.shown`), in the message, the extras and a traceback.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from signoff.runtime.text import shown

# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message", "asctime", "taskName"}


class KeyValueFormatter(logging.Formatter):
    """The standard line plus ``key=value`` for each extra field."""

    def format(self, record: logging.LogRecord) -> str:
        """Format, then append the extras in the order they were given."""
        line = super().format(record)
        extras = [f"{k}={_value(v)}" for k, v in vars(record).items() if k not in _STANDARD]
        if not extras:
            return line
        head, sep, tail = line.partition("\n")  # keep a traceback below the first line
        return f"{head} {' '.join(extras)}{sep}{tail}"


def _value(value: object) -> str:
    text = str(value)
    return f'"{text}"' if (" " in text or not text) else text


class MaskUrls(logging.Filter):
    """Shows a record as people are shown text: URLs masked, invisible characters
    escaped. A filter of the handler (not of a logger), so that records of every logger
    that reach the handler pass it; it changes the record, never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the message (formatted with its args) and string extras by their
        shown form, and render a traceback now so that its text is shown the same way."""
        record.msg = shown(record.getMessage())
        record.args = None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str | dict | list | tuple):
                setattr(record, key, shown(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMAT_ONLY.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = shown(record.exc_text)
        if record.stack_info:
            record.stack_info = shown(record.stack_info)
        return True


_FORMAT_ONLY = logging.Formatter()  # for `formatException`


def handler(stream: TextIO | None = None) -> logging.Handler:
    """The daemon's log handler: key=value lines on ``stream`` (stderr), masked."""
    out = logging.StreamHandler(stream or sys.stderr)
    out.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    out.addFilter(MaskUrls())
    return out


def setup(level: str = "INFO") -> None:
    """Log to stderr with key=value extras, URLs masked."""
    root = logging.getLogger()
    root.handlers[:] = [handler()]
    root.setLevel(level)
    # APScheduler announces every job run at INFO; our scheduler logs what matters.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
