"""Telegram updates turned into decisions: button taps and the text fallback commands.

A tap on a card button (a ``callback_query``) and the commands ``/approve <id> [scope]``
and ``/deny <id> [reason]`` all become one `DecisionEvent` for the flow, which decides
whether this person may answer (by ``telegram:<user id>``, never by username). This
module only reports who acted and relays the flow's answer: every tap is answered with a
toast, even when its data is not ours, so the person's spinner stops.

``/approve`` decides only in the approval chat, where the cards are: an approval must come
from someone who saw the whole action, and a DM with the bot or another group shows none
of it (the id alone says nothing). Elsewhere the bot says where to answer and decides
nothing. ``/deny`` works in any chat: denying approves nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from telegram import CallbackQuery, Message, Update, User
from telegram import error as tg
from telegram.ext import (
    BaseHandler,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    filters,
)

from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    decide_guarded,
)
from signoff.runtime.models import Scope

from .keyboards import MAX_TEXT, decode_callback, decode_undo

log = logging.getLogger(__name__)

PendingLister = Callable[[], Awaitable[list[ApprovalCard]]]
Context = ContextTypes.DEFAULT_TYPE

SURFACE = "telegram"
UNKNOWN_REQUEST = "Unknown or expired request"
NOT_RUNNING = "Approvals are not being taken right now; try again shortly"
FAILED = "Something went wrong; please try again"
ANONYMOUS = "Cannot tell who tapped: nothing was decided"
ELSEWHERE = ("Nothing was decided: /approve works only in the approval chat, where the "
             "request's card shows the whole action. Answer there, or in the console. "
             "(/deny works in any chat.)")
TOAST_LIMIT = 200  # Bot API limit for answerCallbackQuery text

USAGE = (
    "Answer an approval request:\n"
    "/approve <id> [once|session|always] — in the approval chat\n"
    "/deny <id> [reason]\n"
    "/pending — list the requests waiting for an answer"
)
_SCOPE_WORDS = {"once": Scope.ONCE, "session": Scope.SESSION, "always": Scope.ALWAYS}


def actor_of(user: User) -> Actor:
    """Who acted: the numeric user id is the identity; the username is only for display."""
    return Actor(platform=SURFACE, user_id=str(user.id), display=user.username or user.full_name)


class UpdateRouter:
    """Receives taps and commands and hands them to the flow's decision handler."""

    def __init__(self, *, chat_id: str, pending_lister: PendingLister | None) -> None:
        self._chat_id = chat_id
        self._pending_lister = pending_lister
        self.on_decision: DecisionHandler | None = None

    def handlers(self) -> list[BaseHandler[Update, Context, None]]:
        """The python-telegram-bot handlers to add to the application."""
        # MESSAGE, not MESSAGES: an edited "/approve" must not count as a second answer.
        only_new = filters.UpdateType.MESSAGE
        return [
            CallbackQueryHandler(self.on_callback),
            CommandHandler("approve", self.on_approve, filters=only_new),
            CommandHandler("deny", self.on_deny, filters=only_new),
            CommandHandler("pending", self.on_pending, filters=only_new),
            CommandHandler(["help", "start"], self.on_help, filters=only_new),
        ]

    async def on_error(self, update: object, context: Context) -> None:
        """A handler failed on an odd update: log it (PTB would log it as unhandled)."""
        update_id = update.update_id if isinstance(update, Update) else None
        log.error("telegram_update_failed update_id=%s error=%s", update_id,
                  type(context.error).__name__, exc_info=context.error)

    async def on_callback(self, update: Update, context: Context) -> None:
        """A button tap: decide through the flow, then always answer the query."""
        query = update.callback_query
        if query is None:
            return
        # Telegram always says who tapped; an update without it (forged, or a future API
        # change) cannot decide anything, but its spinner is still stopped.
        sender: User | None = query.from_user
        if sender is None:
            log.warning("telegram_callback_anonymous query_id=%s: no sender; ignored", query.id)
            await _answer(query, ANONYMOUS)
            return
        undo_of = decode_undo(query.data)
        decoded = (undo_of, Scope.DENY) if undo_of else decode_callback(query.data)
        if decoded is None:
            log.info("telegram_callback_unknown user_id=%s", sender.id)
            await _answer(query, UNKNOWN_REQUEST)
            return
        approval_id, scope = decoded
        message = query.message
        ref = (CardRef(surface=SURFACE, channel=str(message.chat.id),
                       message_id=str(message.message_id)) if message else None)
        event = DecisionEvent(approval_id=approval_id, scope=scope,
                              actor=actor_of(sender), surface=SURFACE, ref=ref,
                              undo=undo_of is not None)
        await _answer(query, await self._decide(event))

    async def on_approve(self, update: Update, context: Context) -> None:
        """``/approve <id> [once|session|always]`` (default once), in the approval chat."""
        message, user = update.effective_message, update.effective_user
        if message is None or user is None:
            return
        if not self._approval_chat(message):
            log.info("telegram_approve_elsewhere chat_id=%s user_id=%s: nothing decided",
                     message.chat.id, user.id)
            await _reply(message, ELSEWHERE)
            return
        args = context.args or []
        scope = _SCOPE_WORDS.get(args[1].lower()) if len(args) == 2 else Scope.ONCE
        if not 1 <= len(args) <= 2 or scope is None:
            await _reply(message, USAGE)
            return
        # typed_in: the flow checks the card was shown in this very chat (it may not be
        # delivered yet, or never was: the id may come from /pending or another surface).
        event = DecisionEvent(approval_id=args[0], scope=scope, actor=actor_of(user),
                              surface=SURFACE, typed_in=str(message.chat.id))
        await _reply(message, await self._decide(event))

    async def on_deny(self, update: Update, context: Context) -> None:
        """``/deny <id> [reason]``, in any chat."""
        message, user = update.effective_message, update.effective_user
        if message is None or user is None:
            return
        args = context.args or []
        if not args:
            await _reply(message, USAGE)
            return
        event = DecisionEvent(approval_id=args[0], scope=Scope.DENY, actor=actor_of(user),
                              surface=SURFACE, reason=" ".join(args[1:]) or None,
                              typed_in=str(message.chat.id))
        await _reply(message, await self._decide(event))

    async def on_pending(self, update: Update, context: Context) -> None:
        """``/pending``: the open requests, only in the approval chat (targets are private)."""
        message = update.effective_message
        if message is None:
            return
        if not self._approval_chat(message):
            await _reply(message, "Pending requests are listed only in the approval chat.")
            return
        if self._pending_lister is None:
            await _reply(message, "The pending list is not available here.")
            return
        try:
            cards = await self._pending_lister()
        except Exception:  # the person still gets an answer; the cause goes to the log
            log.exception("telegram_pending_failed")
            await _reply(message, FAILED)
            return
        await _reply(message, pending_text(cards))

    async def on_help(self, update: Update, context: Context) -> None:
        """``/help`` and ``/start``: the commands, and this chat's id for the config."""
        message = update.effective_message
        if message is not None:
            await _reply(message, f"{USAGE}\n\nThis chat's id is {message.chat.id}.")

    def _approval_chat(self, message: Message) -> bool:
        """Whether ``message`` was sent in the approval chat (``chat_id``: its number, or
        ``@name`` for a public one)."""
        chat = message.chat
        if str(chat.id) == self._chat_id:
            return True
        name = self._chat_id.removeprefix("@")
        return (name != self._chat_id and chat.username is not None
                and chat.username.lower() == name.lower())

    async def _decide(self, event: DecisionEvent) -> str:
        """The flow's answer for the person, whatever happens inside the flow."""
        handler = self.on_decision
        if handler is None:
            return NOT_RUNNING
        return (await decide_guarded(handler, event, "telegram", FAILED)).message


def pending_text(cards: list[ApprovalCard]) -> str:
    """Plain-text list of open requests with the commands to answer them."""
    if not cards:
        return "Nothing is waiting for approval."
    head = f"{len(cards)} waiting for approval:"
    tail = "Answer with /approve <id> [once|session|always] or /deny <id> [reason]."
    lines: list[str] = []
    budget = MAX_TEXT - len(head) - len(tail) - 40
    for shown, card in enumerate(cards):
        line = (f"• {card.approval_id} — {card.title} ({card.risk}, task {card.task_id}, "
                f"expires {card.expires_at.strftime('%H:%M UTC')})")
        if budget - len(line) - 1 < 0:
            lines.append(f"…and {len(cards) - shown} more")
            break
        budget -= len(line) + 1
        lines.append(line)
    return "\n".join([head, *lines, tail])


async def _answer(query: CallbackQuery, text: str) -> None:
    try:
        await query.answer(text=text[:TOAST_LIMIT])
    except tg.TelegramError as exc:  # e.g. the query is too old; nothing left to tell
        log.warning("telegram_answer_failed query_id=%s error=%s", query.id, type(exc).__name__)


async def _reply(message: Message, text: str) -> None:
    try:
        await message.reply_text(text[:MAX_TEXT])
    except tg.TelegramError as exc:
        log.warning("telegram_reply_failed chat_id=%s error=%s", message.chat.id,
                    type(exc).__name__)
