"""The terminal surface: the card printed, the answer typed at ``[o]nce / [s]ession /
[a]lways / [d]eny``.

An empty answer, end of input and Ctrl-C all mean deny: at a terminal, not answering
must never approve anything. Reading happens in a thread so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import sys
from collections.abc import Sequence
from typing import TextIO

from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    DecisionOutcome,
    with_people,
)
from signoff.runtime.models import DecisionCode, Scope

KEYS = {"o": Scope.ONCE, "once": Scope.ONCE, "s": Scope.SESSION, "session": Scope.SESSION,
        "a": Scope.ALWAYS, "always": Scope.ALWAYS, "d": Scope.DENY, "deny": Scope.DENY}
WORDS = {Scope.ONCE: "[o]nce", Scope.SESSION: "[s]ession", Scope.ALWAYS: "[a]lways",
         Scope.DENY: "[d]eny"}


def render(card: ApprovalCard) -> str:
    """The card as terminal text."""
    lines = [f"[{card.risk}] {card.title}"]
    if card.targets:
        lines.append(f"  targets: {', '.join(card.targets)}")
    for label, value in card.details:
        lines.append(f"  {label}: {value}")
    if card.why:
        lines.append(f"  why (requester): {card.why}")
    if card.task_id is None:
        lines.append(f"  {card.origin}" + (f": {card.goal}" if card.goal else ""))
    else:
        where = f"schedule {card.schedule}, " if card.schedule else ""
        lines.append(f"  task {card.task_id} ({where}step {card.step} of {card.steps_total}): "
                     f"{card.goal}")
    if card.note:
        lines.append(f"  note: {card.note}")
    if card.outcome:
        lines.append(f"  → {card.outcome}")
    return "\n".join(lines)


def parse_answer(text: str | None) -> Scope:
    """What a typed answer means; anything unclear is deny."""
    if text is None:
        return Scope.DENY
    return KEYS.get(text.strip().lower(), Scope.DENY)


class TerminalPlatform:
    """Prints cards and asks the person at the terminal."""

    name = "terminal"

    def __init__(self, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 user: str | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.user = user or getpass.getuser()
        self._ids = itertools.count(1)
        self._cards: asyncio.Queue[tuple[CardRef, ApprovalCard]] = asyncio.Queue()
        self.feedback: list[str] = []
        self.shown: dict[str, ApprovalCard] = {}  # latest state of each printed card

    def _print(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Print the card; the question is asked by `run` / `ask_next`."""
        ref = CardRef(self.name, "tty", str(next(self._ids)))
        self.shown[ref.message_id] = card
        self._print("\n" + render(card))
        await self._cards.put((ref, card))
        return ref

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Print the outcome line."""
        self.shown[ref.message_id] = card
        if card.outcome:
            self._print(f"  → {card.outcome}")

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Print a notification."""
        self._print(with_people(text, mentions))

    async def _read(self, prompt: str) -> str | None:
        self.stdout.write(prompt)
        self.stdout.flush()
        try:
            line = await asyncio.to_thread(self.stdin.readline)
        except (KeyboardInterrupt, EOFError):
            return None
        return line if line else None  # "" is end of input

    async def ask_next(self, on_decision: DecisionHandler) -> DecisionOutcome:
        """Ask about the next posted card and hand the answer to the flow."""
        ref, card = await self._cards.get()
        card = self.shown.get(ref.message_id, card)
        if not card.open:
            return DecisionOutcome(False, card.outcome or "Already decided",
                                   code=DecisionCode.ALREADY_DECIDED)
        choices = " / ".join(WORDS[s] for s in card.allowed)
        try:
            answer = await self._read(f"Allow this action? {choices} (default deny): ")
        except asyncio.CancelledError:
            raise
        scope = parse_answer(answer)
        if scope not in card.allowed:
            scope = Scope.DENY
        event = DecisionEvent(approval_id=card.approval_id, scope=scope,
                              actor=Actor(self.name, self.user), surface=self.name, ref=ref)
        outcome = await on_decision(event)
        if not outcome.accepted:
            self._print(f"  ! {outcome.message}")
        self.feedback.append(outcome.message)
        return outcome

    async def run(self, on_decision: DecisionHandler) -> None:
        """Ask about every card as it is posted, until cancelled."""
        while True:
            await self.ask_next(on_decision)
