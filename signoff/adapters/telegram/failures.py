"""python-telegram-bot errors translated into signoff's error tree, at the adapter edge.

    telegram.error                     signoff.errors
    RetryAfter (429)              ->   RateLimited(retry_after)     retryable
    TimedOut, NetworkError, 5xx   ->   PlatformUnavailable          retryable
    InvalidToken (401/404)        ->   PlatformRejected             final: bad token
    Forbidden (403)               ->   PlatformRejected             final: removed or blocked
    ChatMigrated                  ->   PlatformRejected             final: new chat id
    BadRequest (400)              ->   PlatformRejected             final: names the call

Messages never carry the bot token or a message body; Telegram's descriptions carry
neither (PTB's own InvalidToken text from `Bot.initialize` does, so it is dropped).
"""

from __future__ import annotations

from datetime import timedelta

from telegram import error as tg

from signoff.errors import PlatformError, PlatformRejected, PlatformUnavailable, RateLimited

BAD_TOKEN = (
    "telegram: the bot token was rejected (401 Unauthorized); check telegram.bot_token "
    "(the token @BotFather gave you) and telegram.base_url"
)


def retry_after_seconds(exc: tg.RetryAfter) -> float:
    """Seconds to wait, whether PTB hands out a timedelta or (deprecated) an int."""
    value: object = exc.retry_after
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        return float(value)
    return 1.0


def is_not_modified(exc: tg.TelegramError) -> bool:
    """True for the 400 Telegram sends when an edit would change nothing."""
    return isinstance(exc, tg.BadRequest) and "not modified" in exc.message.lower()


def translate(exc: tg.TelegramError, *, call: str, chat: str | None = None,
              token: str | None = None) -> PlatformError:
    """Our most specific error for one failed Bot API call (raise it ``from exc``).

    ``token`` is blanked out of the message should any library text ever contain it.
    """
    error = _translate(exc, call=call, chat=chat)
    if token and token in str(error):
        error.args = (str(error).replace(token, "<bot token>"),)
    return error


def _translate(exc: tg.TelegramError, *, call: str, chat: str | None) -> PlatformError:
    where = f" in chat {chat}" if chat else ""
    if isinstance(exc, tg.RetryAfter):
        seconds = retry_after_seconds(exc)
        return RateLimited(f"telegram: {call}{where} rate limited; retry in {seconds:g}s",
                           retry_after=seconds)
    if isinstance(exc, tg.InvalidToken):
        return PlatformRejected(BAD_TOKEN)
    if isinstance(exc, tg.Forbidden):
        return PlatformRejected(
            f"telegram: bot was removed from chat {chat or '?'} or blocked: {exc.message} "
            "(add the bot to the chat again, or fix telegram.chat_id)"
        )
    if isinstance(exc, tg.ChatMigrated):
        return PlatformRejected(
            f"telegram: chat {chat or '?'} became a supergroup; set telegram.chat_id = "
            f"{exc.new_chat_id}"
        )
    # BadRequest subclasses NetworkError, so it is tested first.
    if isinstance(exc, tg.BadRequest):
        return PlatformRejected(f"telegram: {call}{where} was rejected: {exc.message}")
    if isinstance(exc, tg.NetworkError):  # includes TimedOut and 5xx answers
        return PlatformUnavailable(f"telegram: {call}{where} failed: {exc.message}")
    if isinstance(exc, tg.Conflict):
        return PlatformUnavailable(f"telegram: {call} conflicts: {exc.message}")
    return PlatformUnavailable(f"telegram: {call}{where} failed: {type(exc).__name__}")
