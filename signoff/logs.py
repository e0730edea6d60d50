"""Log lines for people and grep: ``time level logger event key=value …``.

Code logs a stable snake_case event name and puts ids in ``extra=``; this formatter
prints those extras after the event, so ``schedule_skipped schedule=nightly task_id=t-…``
is one greppable line. Tokens and message bodies are never passed in extras.

Every record that reaches the handler passes `MaskUrls` first — ours and every
library's (httpx logs each request's full URL at INFO, ``?token=…`` included): URLs are
masked and invisible characters escaped the way every other surface shows them
(`signoff.runtime.text.shown`), in the message, the extras and a traceback.

A line is written per task that ends (``task_completed``), so the path is kept cheap
without changing a character of it: strings that `shown` would return unchanged (plain
printable ASCII without ``://``) are not walked, the time stamp's date and time are
formatted once per second, and `setup` turns off what the line never prints (the caller's
file and line, found by walking the stack; thread and process names).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

from signoff.runtime.text import shown

# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message", "asctime", "taskName"}


class KeyValueFormatter(logging.Formatter):
    """The standard line plus ``key=value`` for each extra field."""

    _second: tuple[int, str] = (-1, "")  # a second and its formatted date and time

    def format(self, record: logging.LogRecord) -> str:
        """Format, then append the extras in the order they were given."""
        line = super().format(record)
        fields = vars(record)
        if fields.keys() <= _STANDARD:
            return line
        extras = [f"{k}={_value(v)}" for k, v in fields.items() if k not in _STANDARD]
        if not extras:
            return line
        head, sep, tail = line.partition("\n")  # keep a traceback below the first line
        return f"{head} {' '.join(extras)}{sep}{tail}"


    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """As `logging.Formatter.formatTime` (``2026-01-02 03:04:05,678`` by default),
        the date and time formatted once per second rather than once per line."""
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached = self._second  # one tuple: two threads formatting never mix two halves
        if cached[0] != second:
            cached = (second, time.strftime(self.default_time_format,
                                            self.converter(second)))
            self._second = cached
        msec = self.default_msec_format
        return msec % (cached[1], record.msecs) if msec else cached[1]


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
        record.msg = _shown(record.getMessage())
        record.args = None
        fields = vars(record)
        for key in fields.keys() - _STANDARD:  # the extras (in any order: each on its own)
            value = fields[key]
            if isinstance(value, str | dict | list | tuple):
                fields[key] = _shown(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMAT_ONLY.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = shown(record.exc_text)
        if record.stack_info:
            record.stack_info = shown(record.stack_info)
        return True


_FORMAT_ONLY = logging.Formatter()  # for `formatException`


def _shown(value: Any) -> Any:
    """`shown`, without its walk for a string it would return unchanged: printable ASCII
    holds no invisible character, and without ``://`` no URL (ids, event names, counts)."""
    if type(value) is str and value.isascii() and value.isprintable() and "://" not in value:
        return value
    return shown(value)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on ``sys.stderr`` as it is when a line is written, not when the handler
    was made: a program that swaps ``sys.stderr`` (a host that embeds the CLI, a test
    runner that captures it and closes its capture) must not leave the log writing to a
    stream that is gone. The standard library's own last-resort handler does the same."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        """`StreamHandler.__init__` assigns one; the property ignores it."""


def handler(stream: TextIO | None = None) -> logging.Handler:
    """The daemon's log handler: key=value lines on ``stream`` (or whatever ``sys.stderr``
    is when a line is written), masked."""
    out = logging.StreamHandler(stream) if stream is not None else _Stderr()
    out.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    out.addFilter(MaskUrls())
    return out


def setup(level: str = "INFO") -> None:
    """Log to stderr with key=value extras, URLs masked."""
    root = logging.getLogger()
    root.handlers[:] = [handler()]
    root.setLevel(level)
    # What no line of ours prints, so no record should pay for it: the caller's file and
    # line (a walk up the stack per record) and the thread's and process's names.
    logging._srcfile = None  # the documented switch (logging HOWTO, "Optimization")
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # APScheduler announces every job run at INFO; our scheduler logs what matters.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
