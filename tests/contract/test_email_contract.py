"""EmailSurface passes the surface contract: cards mailed through a real SMTP server
(tests/fakes/smtp.py), clicked by following the mail's link and posting its page's form.

The harness plays the mail reader (it reads the mails the fake server received) and the
daemon's store (it answers the surface's `lookup` with the card that was clicked). Each
contract test posts one card, so the card a test looks at is the latest mail.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
import pytest

from signoff.adapters.email.messages import LINK_WORDS
from signoff.adapters.email.settings import EmailSurfaceSettings
from signoff.adapters.email.surface import EmailSurface
from signoff.bot.ports import ApprovalCard, CardRef, DecisionHandler, PostedCard
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Scope
from signoff.testing import (
    BUTTON_LABELS,
    Rendered,
    SurfaceContract,
    cancel_and_wait,
    route_client,
    sample_card,
)
from tests.fakes.smtp import FakeSmtpServer, ReceivedMessage

READER = "alice@example.com"


def _text(page: str) -> str:
    """Visible text of an HTML page, one space between pieces."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _links(mail: ReceivedMessage) -> list[tuple[Scope, str]]:
    """The decision links of a mail, in the order it lists them."""
    found = []
    for line in mail.body.replace("\r\n", "\n").splitlines():
        for scope, words in LINK_WORDS.items():
            if line.startswith(f"{words}: http"):
                found.append((scope, line.rpartition(" ")[2]))
    return found


@dataclass
class EmailHarness:
    """`SurfaceHarness` for the e-mail surface."""

    surface: EmailSurface
    smtp: FakeSmtpServer
    client: httpx.AsyncClient
    posted: dict[str, PostedCard]  # what the daemon's store answers `lookup` with
    user_id: str = READER
    notify_channel: str = "email"
    _task: asyncio.Task[None] | None = None
    _seen: list[str] = field(default_factory=list)

    async def start(self, on_decision: DecisionHandler) -> None:
        """Run the surface (its `run` keeps the handler) in the background."""
        self._task = asyncio.create_task(self.surface.run(on_decision))
        while self.surface.handler is None:
            await asyncio.sleep(0)

    async def stop(self) -> None:
        """Cancel `run`."""
        await cancel_and_wait(self._task)
        self._task = None

    def latest(self) -> ReceivedMessage:
        """The newest mail to the reader."""
        mails = [m for m in self.smtp.messages if m.recipients == [self.user_id]]
        assert mails, "no mail arrived"
        return mails[-1]

    async def click(self, ref: CardRef, card: ApprovalCard, scope: Scope, user_id: str) -> None:
        """Follow the mail's link for ``scope`` and press the button on the page it opens."""
        assert user_id == self.user_id, "a link decides as the address it was mailed to"
        self.posted[card.approval_id] = PostedCard(card=card, refs=(ref,))
        url = dict(_links(self.latest()))[scope]
        parts = urlsplit(url)
        page = await self.client.get(f"{parts.path}?{parts.query}")
        assert page.status_code == 200, page.text
        token = re.search(r"name='token' value='([^']+)'", page.text)
        assert token is not None
        answer = await self.client.post(parts.path, data={"token": html.unescape(token[1])})
        self._seen.append(_text(answer.text))

    async def rendered(self, ref: CardRef) -> Rendered:
        """The card as the reader sees it now: the newest mail, its links as buttons."""
        mail = self.latest()
        buttons = tuple(BUTTON_LABELS[scope] for scope, _ in _links(mail))
        return Rendered(text=mail.body, buttons=buttons)

    async def feedback(self) -> list[str]:
        """The pages shown after pressing a button."""
        return list(self._seen)

    async def notifications(self, channel: str) -> list[str]:
        """E-mail carries no notes: whatever was mailed besides cards (nothing, expected)."""
        return [m.body for m in self.smtp.messages if "Approval needed" not in m.subject]


@pytest.fixture
async def harness() -> AsyncIterator[EmailHarness]:
    posted: dict[str, PostedCard] = {}

    async def lookup(approval_id: str) -> PostedCard | None:
        return posted.get(approval_id)

    with FakeSmtpServer() as smtp:
        settings = EmailSurfaceSettings(to=[READER], public_url="https://signoff.test",
                                        host=smtp.host, port=smtp.port,
                                        sender="signoff@example.com")
        surface = EmailSurface(settings=settings, lookup=lookup, secret=b"k" * 32,
                               clock=FakeClock(sample_card().requested_at))
        async with route_client(surface) as client:
            yield EmailHarness(surface=surface, smtp=smtp, client=client, posted=posted)


class TestEmailContract(SurfaceContract):
    """The shared surface contract, on e-mail."""

    async def test_notify_posts_one_line(self, harness: EmailHarness) -> None:  # type: ignore[override]
        """E-mail carries only the cards: a note sends no mail (the surface has no channels)."""
        await harness.surface.notify(harness.notify_channel, "Task t1 completed")
        assert await harness.notifications(harness.notify_channel) == []
        assert harness.surface.channel_prefix is None
