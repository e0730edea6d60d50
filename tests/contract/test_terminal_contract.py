"""The surface contract, run against the terminal surface of `signoff handle`."""

from __future__ import annotations

import asyncio
import io
import os
from dataclasses import dataclass, field

import pytest

from signoff.adapters.terminal.surface import WORDS, TerminalSurface, parse_answer, render
from signoff.bot.ports import ApprovalCard, CardRef, DecisionHandler
from signoff.runtime.models import Scope
from signoff.testing import BUTTON_LABELS, Rendered, SurfaceContract, cancel_and_wait

KEY = {Scope.ONCE: "o", Scope.SESSION: "s", Scope.ALWAYS: "a", Scope.DENY: "d"}


@dataclass
class TerminalHarness:
    """Types answers into a pipe that the terminal surface reads as its stdin."""

    user_id: str = "alice"
    notify_channel: str = "tty"
    out: io.StringIO = field(default_factory=io.StringIO)
    surface: TerminalSurface = field(init=False)
    _task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        read_fd, self._write_fd = os.pipe()
        self._stdin = os.fdopen(read_fd, "r")
        self.surface = TerminalSurface(stdin=self._stdin, stdout=self.out, user=self.user_id)

    async def start(self, on_decision: DecisionHandler) -> None:
        """Ask about cards as they come."""
        self._task = asyncio.create_task(self.surface.run(on_decision))

    async def stop(self) -> None:
        """Stop asking; close the pipe."""
        os.close(self._write_fd)
        await cancel_and_wait(self._task)
        self._stdin.close()

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Type the answer's letter and wait until the flow answered."""
        before = len(self.surface.feedback)
        os.write(self._write_fd, f"{KEY[scope]}\n".encode())
        for _ in range(500):
            if len(self.surface.feedback) > before:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the terminal never handed the answer to the flow")

    async def rendered(self, ref: CardRef) -> Rendered:
        """What was printed for the card, and the choices still offered."""
        card = self.surface.shown[ref.message_id]
        assert render(card).splitlines()[0] in self.out.getvalue()
        buttons = tuple(BUTTON_LABELS[s] for s in card.allowed) if card.open else ()
        return Rendered(text=render(card), buttons=buttons)

    async def feedback(self) -> list[str]:
        """What was printed back to the person (refusals)."""
        return [line for line in self.out.getvalue().splitlines() if "  ! " in line]

    async def notifications(self, channel: str) -> list[str]:
        """Everything printed."""
        return self.out.getvalue().splitlines()


class TestTerminalContract(SurfaceContract):
    """The terminal behaves like every other surface."""

    @pytest.fixture
    async def harness(self) -> TerminalHarness:
        """A terminal on a pipe."""
        h = TerminalHarness()
        yield h
        if h._task is None:
            os.close(h._write_fd)
            h._stdin.close()


@pytest.mark.parametrize("typed,expected", [
    ("o\n", Scope.ONCE), ("session\n", Scope.SESSION), ("A\n", Scope.ALWAYS), ("d\n", Scope.DENY),
    ("\n", Scope.DENY), ("yes please\n", None), ("y\n", None), (None, Scope.DENY)])
def test_answers_default_to_deny(typed: str | None, expected: Scope | None) -> None:
    """Empty input and end of input mean deny; an unclear answer means nothing (asked again)."""
    assert parse_answer(typed) is expected


def test_prompt_words_cover_every_scope() -> None:
    """Each scope has its bracketed key in the prompt."""
    assert [WORDS[s] for s in Scope] == ["[o]nce", "[s]ession", "[a]lways", "[d]eny"]
