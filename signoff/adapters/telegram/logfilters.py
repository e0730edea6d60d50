"""Filters on python-telegram-bot's and httpx's loggers, so the daemon log stays clean.

- httpx logs every request URL at INFO, and a Bot API URL carries the bot token
  (``/bot<TOKEN>/sendMessage``): registered tokens are replaced by ``<bot token>``.
- AIORateLimiter logs a full traceback for each 429 it gives up on; with max_retries=0 that
  is every 429, which we re-raise as RateLimited for the outbox to retry and log.

Each filter is installed once per process, however many surfaces are built.
"""

from __future__ import annotations

import logging
from typing import TypeVar

_F = TypeVar("_F", bound=logging.Filter)


class RedactTokens(logging.Filter):
    """Replace known bot tokens in a record's message."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the message when it contains a token; never drop the record."""
        if not self.tokens:
            return True
        message = record.getMessage()
        hidden = message
        for token in self.tokens:
            hidden = hidden.replace(token, "<bot token>")
        if hidden != message:
            record.msg, record.args = hidden, ()
        return True


class QuietRetryAfter(logging.Filter):
    """Drop AIORateLimiter's "Rate limit hit after maximum of 0 retries" traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every other record."""
        return not record.getMessage().startswith("Rate limit hit after maximum")


def _install(logger_name: str, kind: type[_F]) -> _F:
    logger = logging.getLogger(logger_name)
    for existing in logger.filters:
        if isinstance(existing, kind):
            return existing
    new = kind()
    logger.addFilter(new)
    return new


def hide_token(token: str) -> None:
    """Keep ``token`` out of httpx's request log lines (and quiet the rate limiter)."""
    _install("telegram.ext.AIORateLimiter", QuietRetryAfter)
    if token:
        _install("httpx", RedactTokens).tokens.add(token)
