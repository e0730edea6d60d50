"""Log lines for people and grep: ``time level logger event key=value …``.

Code logs a stable snake_case event name and puts ids in ``extra=``; this formatter
prints those extras after the event, so ``schedule_skipped schedule=nightly task_id=t-…``
is one greppable line. Tokens and message bodies are never passed in extras.
"""

from __future__ import annotations

import logging
import sys

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


def setup(level: str = "INFO") -> None:
    """Log to stderr with key=value extras."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # APScheduler announces every job run at INFO; our scheduler logs what matters.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
