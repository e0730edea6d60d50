"""A real SMTP server on 127.0.0.1 (aiosmtpd) that records what it receives.

    with FakeSmtpServer() as smtp:
        ...send to smtp.host:smtp.port...
        assert smtp.messages[0].recipients == ["john@example.com"]

It runs in its own thread and event loop (aiosmtpd's Controller), so both blocking
smtplib code and async code under test can talk to it. ``refuse`` makes it answer 550
to the listed recipients, to test partial and total refusals.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from types import TracebackType
from typing import Any

from aiosmtpd.controller import Controller


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class ReceivedMessage:
    """One delivered message: the SMTP envelope and the parsed content."""

    sender: str
    recipients: list[str]
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    @property
    def body(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        return part.get_content() if part is not None else ""


@dataclass
class _Handler:
    refuse: set[str]
    messages: list[ReceivedMessage] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(  # aiosmtpd's hook name
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        if address.lower() in self.refuse:
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # aiosmtpd's hook name
        self, server: Any, session: Any, envelope: Any
    ) -> str:
        parsed = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        record = ReceivedMessage(envelope.mail_from, list(envelope.rcpt_tos), parsed)
        with self.lock:
            self.messages.append(record)
        return "250 Message accepted for delivery"


class FakeSmtpServer:
    """An aiosmtpd server on a free local port; a context manager that starts and stops it."""

    def __init__(self, *, host: str = "127.0.0.1", refuse: set[str] | None = None) -> None:
        self.host = host
        self.port = free_port(host)
        self._handler = _Handler(refuse={a.lower() for a in refuse or set()})
        self._controller = Controller(self._handler, hostname=host, port=self.port)

    @property
    def messages(self) -> list[ReceivedMessage]:
        """Messages received so far, oldest first."""
        with self._handler.lock:
            return list(self._handler.messages)

    def start(self) -> None:
        self._controller.start()

    def stop(self) -> None:
        self._controller.stop()

    def __enter__(self) -> FakeSmtpServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
