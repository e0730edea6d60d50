"""The terminal surface: the card printed, the answer typed at ``[o]nce / [s]ession /
[a]lways / [d]eny``.

An empty answer, end of input and Ctrl-C mean deny: at a terminal, not answering must
never approve anything. An answer that means nothing (``y``, ``x``) is asked again rather
than taken as a deny, since it is usually a person guessing the keys. The prompt also
ends, without an answer, when the request is settled elsewhere (the caller's ``settled``
awaitable: expiry, or a decision in the console or over the API).

A terminal stdin is read through the event loop (``add_reader``) rather than a thread: a
thread blocked in ``readline`` cannot be stopped, which left Ctrl-C and expiry hanging.
Streams without a file descriptor (tests' ``StringIO``) are read in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import itertools
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from signoff.bot.cards import why_line
from signoff.bot.ports import (
    Actor,
    ApprovalCard,
    CardRef,
    DecisionEvent,
    DecisionHandler,
    DecisionOutcome,
    Route,
    with_people,
)
from signoff.runtime.models import ActionRecord, DecisionCode, Scope
from signoff.runtime.text import shown as as_shown
from signoff.runtime.words import ALREADY_DECIDED

KEYS = {"o": Scope.ONCE, "once": Scope.ONCE, "s": Scope.SESSION, "session": Scope.SESSION,
        "a": Scope.ALWAYS, "always": Scope.ALWAYS, "d": Scope.DENY, "deny": Scope.DENY,
        "": Scope.DENY}
WORDS = {Scope.ONCE: "[o]nce", Scope.SESSION: "[s]ession", Scope.ALWAYS: "[a]lways",
         Scope.DENY: "[d]eny"}
INTERRUPTED = "interrupted at the terminal (Ctrl-C)"
OUTPUT_CHARS = 300  # of an action's output shown after it ran
OUTPUT_LINES = 6


def render(card: ApprovalCard) -> str:
    """The card as terminal text."""
    lines = [f"[{card.risk}] {card.title}"]
    if card.targets:
        lines.append(f"  targets: {', '.join(card.targets)}")
    for label, value in card.details:
        lines.append(f"  {label}: {value}")
    lines.extend(_preview_lines(card))
    why = why_line(card)
    if why:
        lines.append(f"  {why}")
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


def _preview_lines(card: ApprovalCard) -> list[str]:
    """The preview (a diff, the whole command) indented under its label."""
    if card.preview is None:
        return []
    return [f"  {card.preview.label}:", *(f"    {row}" for row in card.preview.text.splitlines())]


def parse_answer(text: str | None) -> Scope | None:
    """What a typed answer means: Enter and end of input deny, None for no meaning."""
    if text is None:
        return Scope.DENY
    return KEYS.get(text.strip().lower())


def render_record(record: ActionRecord) -> str:
    """One ran (or failed) action and what came out of it, shortened for a terminal, its
    shown like a card's texts (URLs masked; an ESC or CR is an escape, not a command to
    the terminal)."""
    return as_shown(_record_text(record))


def _record_text(record: ActionRecord) -> str:
    what = f"{record.tool} {', '.join(record.targets)}".rstrip()
    if record.outcome != "ok":
        return f"  ✗ {what}: {record.error or record.outcome}"
    text = _output_text(record.output)
    if not text:
        return f"  ✓ {what}"
    lines = text.splitlines() or [""]
    shown = "\n".join(lines[:OUTPUT_LINES])
    cut = len(lines) > OUTPUT_LINES or len(shown) > OUTPUT_CHARS
    shown = shown[:OUTPUT_CHARS] + ("…" if cut else "")
    return f"  ✓ {what}\n" + "\n".join(f"    {line}" for line in shown.splitlines())


def _output_text(output: Any) -> str:
    """The part of a tool's output a person wants to read (a file's text, a command's
    stdout, a listing's names), else the output as compact JSON."""
    if not isinstance(output, dict):
        return "" if output is None else str(output)
    for key in ("content", "stdout", "body"):
        if isinstance(output.get(key), str):
            return str(output[key]).rstrip()
    if isinstance(output.get("entries"), list):
        return "  ".join(str(e.get("name", e)) if isinstance(e, dict) else str(e)
                         for e in output["entries"])
    return json.dumps(output, ensure_ascii=False, default=str)


class _Interrupted(Exception):
    """Ctrl-C at the prompt."""


class TerminalSurface:
    """Prints cards and asks the person at the terminal."""

    name = "terminal"
    channel_prefix = None

    def __init__(self, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 user: str | None = None) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.user = user or getpass.getuser()
        self._ids = itertools.count(1)
        self._cards: asyncio.Queue[tuple[CardRef, ApprovalCard]] = asyncio.Queue()
        self._buffer = b""
        self._printed: set[str] = set()  # approval ids whose card was printed
        self._outcomes: set[tuple[str, str]] = set()  # (approval id, outcome) printed
        self.feedback: list[str] = []
        self.shown: dict[str, ApprovalCard] = {}  # latest state of each printed card

    async def check(self) -> None:
        """Nothing to verify: the person is at this terminal."""

    def routes(self) -> tuple[Route, ...]:
        """None: answers come from stdin."""
        return ()

    def _print(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    async def post_card(self, card: ApprovalCard) -> CardRef:
        """Print the card; the question is asked by `run` / `ask_next` / `ask`."""
        ref = CardRef(self.name, "tty", str(next(self._ids)))
        self.shown[ref.message_id] = card
        self._show_card(card)
        await self._cards.put((ref, card))
        return ref

    def _show_card(self, card: ApprovalCard) -> None:
        if card.approval_id not in self._printed:
            self._printed.add(card.approval_id)
            self._print("\n" + render(card))

    async def update_card(self, ref: CardRef, card: ApprovalCard) -> None:
        """Print the outcome line (once, however many ways it arrives)."""
        self.shown[ref.message_id] = card
        self.show_outcome(card)

    def show_outcome(self, card: ApprovalCard) -> None:
        """Print a decided card's outcome (or a quorum's progress, "1 of 2 approvals")
        unless it was printed already."""
        line = card.outcome or (card.progress if card.open else None)
        if line and (card.approval_id, line) not in self._outcomes:
            self._outcomes.add((card.approval_id, line))
            self._print(f"  → {line}")

    def show_action(self, record: ActionRecord) -> None:
        """Print what one action did (what `read_file` read, a command's output)."""
        self._print(render_record(record))

    async def notify(self, channel: str, text: str, *, thread: CardRef | None = None,
                     mentions: Sequence[str] = ()) -> None:
        """Print a notification. A plain reply under a card ("Task … completed") is not
        printed: at the terminal the run's own last line already says how the task ended;
        one that asks people (escalation, reminder) is."""
        if thread is None or mentions:
            self._print(with_people(text, mentions))

    async def ask_next(self, on_decision: DecisionHandler) -> DecisionOutcome:
        """Ask about the next posted card and hand the answer to the flow."""
        ref, card = await self._cards.get()
        card = self.shown.get(ref.message_id, card)
        if not card.open:
            return DecisionOutcome(False, card.outcome or ALREADY_DECIDED,
                                   code=DecisionCode.ALREADY_DECIDED)
        outcome = await self.ask(card, on_decision, ref=ref)
        assert outcome is not None  # without ``settled`` only an answer ends the prompt
        return outcome

    async def ask(self, card: ApprovalCard, on_decision: DecisionHandler, *,
                  ref: CardRef | None = None,
                  settled: Callable[[], Awaitable[None]] | None = None
                  ) -> DecisionOutcome | None:
        """Ask until a valid answer (handed to the flow) or until ``settled`` returns
        (None: decided elsewhere or expired; the caller shows what happened)."""
        self._show_card(card)
        choices = " / ".join(WORDS[s] for s in card.allowed)
        watch = asyncio.ensure_future(settled()) if settled is not None else None
        interrupted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Taken over before the prompt is shown, so an early Ctrl-C is a deny too.
        with _sigint_sets(asyncio.get_running_loop(), interrupted):
            try:
                return await self._ask(card, choices, on_decision, ref, watch, interrupted)
            finally:
                if watch is not None and not watch.done():
                    watch.cancel()
                    await asyncio.gather(watch, return_exceptions=True)

    async def _ask(self, card: ApprovalCard, choices: str, on_decision: DecisionHandler,
                   ref: CardRef | None, watch: asyncio.Future[None] | None,
                   interrupted: asyncio.Future[None]) -> DecisionOutcome | None:
        while True:
            try:
                text = await self._prompt(f"Allow this action? {choices} (default deny): ",
                                          watch, interrupted)
            except _Interrupted:
                self._print("")  # the terminal echoed ^C; end its line
                return await self._hand_over(card, Scope.DENY, on_decision, ref,
                                             reason=INTERRUPTED)
            if watch is not None and watch.done():
                self._print("")
                return None
            scope = parse_answer(text)
            if scope is not None and scope in card.allowed:
                return await self._hand_over(card, scope, on_decision, ref)
            self._print(f"  ? type one of {choices}, or press Enter to deny")

    async def _hand_over(self, card: ApprovalCard, scope: Scope, on_decision: DecisionHandler,
                         ref: CardRef | None, *, reason: str | None = None) -> DecisionOutcome:
        event = DecisionEvent(approval_id=card.approval_id, scope=scope,
                              actor=Actor(self.name, self.user), surface=self.name,
                              reason=reason, ref=ref)
        outcome = await on_decision(event)
        if not outcome.accepted:
            self._print(f"  ! {outcome.message}")
        self.feedback.append(outcome.message)
        return outcome

    async def _prompt(self, prompt: str, watch: asyncio.Future[None] | None,
                      interrupted: asyncio.Future[None]) -> str | None:
        """One line typed, None at end of input, "" when ``watch`` finished first;
        `_Interrupted` on Ctrl-C (``interrupted`` done)."""
        self.stdout.write(prompt)
        self.stdout.flush()
        reading = asyncio.ensure_future(self._read_line())
        waiting: set[asyncio.Future[Any]] = {reading, interrupted}
        if watch is not None:
            waiting.add(watch)
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not reading.done():
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
        if interrupted.done():
            raise _Interrupted
        if reading.done() and not reading.cancelled():
            return reading.result()
        return ""

    async def _read_line(self) -> str | None:
        """A line from stdin without blocking the loop (a thread only without a fd)."""
        try:
            fd = self.stdin.fileno()
        except (AttributeError, OSError, ValueError):  # io.StringIO and friends
            line = await asyncio.to_thread(self.stdin.readline)
            return line or None
        loop = asyncio.get_running_loop()
        while b"\n" not in self._buffer:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _complete, ready)
            try:
                await ready
            finally:
                loop.remove_reader(fd)
            chunk = os.read(fd, 4096)
            if not chunk:  # end of input: what was typed without Enter still counts
                line, self._buffer = self._buffer, b""
                return line.decode(errors="replace") or None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace") + "\n"

    async def run(self, on_decision: DecisionHandler) -> None:
        """Ask about every card as it is posted, until cancelled."""
        while True:
            await self.ask_next(on_decision)


def _complete(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@contextlib.contextmanager
def _sigint_sets(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> Any:
    """While the prompt is open, Ctrl-C completes ``future`` instead of cancelling the run.

    asyncio.run's own SIGINT handler is put back afterwards. Off the main thread signal
    handlers cannot be set; Ctrl-C then keeps its usual effect.
    """
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, _complete, future)
    except (RuntimeError, ValueError, NotImplementedError):
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)
