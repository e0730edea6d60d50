"""Messaging tools: send_email (SMTP) and post_message (a chat channel), both SEND.

The fingerprint of an e-mail is its set of recipients, never its subject or body: the
contract says approving an e-mail to John covers another e-mail to John, not one to
anyone else. Recipients are compared as bare addresses, lowercased and deduplicated, so
"John <John@Example.com>" and "john@example.com" are one target and order never matters.

A chat channel names its surface: ``slack:<conversation id>`` (``slack:C0123ABC``),
``telegram:<chat id>`` (``telegram:-100123``, or a public ``telegram:@channelname``), or
another installed surface's. Each surface's plug-in says how its ids look; the wiring
hands those forms over in `ToolContext.channels`. `parse_channel` is the one place that
reads a channel; the wiring's poster uses it too.
"""

from __future__ import annotations

import asyncio
import re
import smtplib
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate, getaddresses, make_msgid
from typing import Any

from signoff.errors import BadArguments, SignoffError, ToolError
from signoff.runtime.models import RiskClass
from signoff.runtime.text import shorten
from signoff.runtime.tools.base import (
    ChannelForm,
    MessagePoster,
    Param,
    SmtpSettings,
    ToolContext,
)


def parse_channel(channel: str, forms: Sequence[ChannelForm]) -> tuple[str, str]:
    """``("slack", "C123")`` for ``"slack:C123"``; BadArguments naming the expected form.

    ``forms`` are the installed surfaces' (`ToolContext.channels`): each surface says how
    its channel ids look, so a surface from another package needs no line here.
    """
    prefix, sep, target = channel.strip().partition(":")
    form = next((f for f in forms if f.prefix == prefix), None) if sep else None
    if form is None:
        expected = " or ".join(f.expected for f in forms) or "no chat surface is installed"
        raise BadArguments(f"post_message: channel {channel!r} names no chat surface "
                           f"(expected {expected})")
    if not re.fullmatch(form.pattern, target):
        raise BadArguments(f"post_message: channel {channel!r} is not {form.kind}")
    return prefix, target


def _no_newlines(field: str, value: str) -> None:
    """A CR or LF in a header would let a planner inject extra headers or recipients."""
    if "\r" in value or "\n" in value:
        raise BadArguments(f"send_email: {field} must be one line")


def _parse_addresses(field: str, value: Any) -> list[str]:
    """Bare addresses from a string ("a@x, B <b@y>") or a list of such strings."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise BadArguments(f"send_email: {field} must be a string or a list of strings")
    found: list[str] = []
    for item in items:
        _no_newlines(field, item)
        if not item.strip():
            continue
        for _, parsed in getaddresses([item]):
            addr = parsed.strip()
            local, at, domain = addr.partition("@")
            if not at or "@" in domain or not local or not domain or " " in addr:
                raise BadArguments(f"send_email: {field} has an invalid address {item!r}")
            found.append(addr)
    return found


def recipients(args: dict[str, Any]) -> tuple[str, ...]:
    """The sorted, lowercased, deduplicated recipients of to + cc; at least one."""
    addrs = _parse_addresses("to", args["to"]) + _parse_addresses("cc", args.get("cc") or [])
    unique = sorted({a.lower() for a in addrs})
    if not unique:
        raise BadArguments("send_email: to names no recipient")
    return tuple(unique)


def build_message(args: dict[str, Any], sender: str) -> EmailMessage:
    """The RFC 5322 message for ``args``; display names from the arguments are kept."""
    _no_newlines("subject", args["subject"])
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(_parse_addresses("to", args["to"]))
    cc = _parse_addresses("cc", args.get("cc") or [])
    if cc:
        msg["Cc"] = ", ".join(cc)
    msg["Subject"] = args["subject"]
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    msg.set_content(args["body"])
    return msg


def _deliver(msg: EmailMessage, to: tuple[str, ...], smtp: SmtpSettings) -> dict[str, Any]:
    """Blocking SMTP exchange; runs in a worker thread."""
    with smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout) as client:
        client.ehlo()
        if smtp.starttls:
            client.starttls(context=ssl.create_default_context())
            client.ehlo()
        if smtp.username:
            client.login(smtp.username, smtp.password or "")
        refused = client.send_message(msg, from_addr=smtp.sender, to_addrs=list(to))
    return {
        "sent_to": [a for a in to if a not in refused],
        "refused": {
            addr: f"{code} {reply.decode(errors='replace')}"
            for addr, (code, reply) in refused.items()
        },
        "message_id": msg["Message-ID"],
    }


class SendEmailTool:
    """Send an e-mail through the configured SMTP server."""

    name = "send_email"
    content = ("subject", "body")
    capability = "email.send"
    description = "Send a plain-text e-mail to one or more recipients."
    params: tuple[Param, ...] = (
        Param("to", (str, list), description="Recipient address or list of addresses."),
        Param("subject", str, description="Subject line."),
        Param("body", str, description="Plain-text body."),
        Param("cc", (str, list), required=False, description="Copy recipients."),
    )

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.SEND

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"recipients": list(recipients(args))}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return recipients(args)

    def summary(self, args: dict[str, Any]) -> str:
        text = f"Send email to {', '.join(recipients(args)) or 'nobody'}"
        if args.get("subject"):
            text += f" — subject '{shorten(args['subject'], 60)}'"
        return text

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        to = recipients(args)
        msg = build_message(args, ctx.smtp.sender)
        where = f"{ctx.smtp.host}:{ctx.smtp.port}"
        try:
            result = await asyncio.to_thread(_deliver, msg, to, ctx.smtp)
        except smtplib.SMTPRecipientsRefused as exc:
            raise ToolError(
                f"send_email: {where} refused every recipient: {', '.join(exc.recipients)}"
            ) from exc
        except smtplib.SMTPAuthenticationError as exc:
            raise ToolError(
                f"send_email: {where} rejected the SMTP login ({exc.smtp_code})"
            ) from exc
        except (smtplib.SMTPException, OSError) as exc:
            reason = exc or type(exc).__name__
            raise ToolError(f"send_email via {where} failed: {reason}") from exc
        return result


class PostMessageTool:
    """Post a text message to a chat channel through the configured surfaces."""

    name = "post_message"
    content = ("text",)
    capability = "chat.post"
    description = "Post a text message to a chat channel such as 'slack:C123' or 'telegram:42'."
    params: tuple[Param, ...] = (
        Param("channel", str, description="Channel, e.g. 'slack:C123' or 'telegram:-100123'."),
        Param("text", str, description="The message text."),
    )

    def risk_for(self, args: dict[str, Any]) -> RiskClass:
        return RiskClass.SEND

    def fingerprint_fields(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"channel": _channel(args)}

    def targets(self, args: dict[str, Any]) -> tuple[str, ...]:
        return (_channel(args),)

    def summary(self, args: dict[str, Any]) -> str:
        return f"Post a message to {args['channel']}"

    async def check(self, args: dict[str, Any], ctx: ToolContext) -> None:
        """Refuse a malformed channel, or one no configured surface reaches, before asking."""
        _reachable(_channel(args), ctx)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        channel = _channel(args)
        poster = _reachable(channel, ctx)
        try:
            await poster.post(channel, args["text"])
        except ToolError:
            raise
        except SignoffError as exc:  # PlatformError and kin: keep the platform's message
            raise ToolError(f"post_message to {channel} failed: {exc}") from exc
        return {"channel": channel, "posted": True}


def _channel(args: dict[str, Any]) -> str:
    channel = str(args["channel"]).strip()
    if not channel:
        raise BadArguments("post_message: channel is empty")
    return channel


def _reachable(channel: str, ctx: ToolContext) -> MessagePoster:
    """The poster that reaches ``channel``; BadArguments (malformed) or ToolError otherwise."""
    parse_channel(channel, ctx.channels)
    if ctx.post_message is None:
        raise ToolError(f"no chat platform can reach channel {channel}")
    why = ctx.post_message.unreachable(channel)
    if why:
        raise ToolError(f"post_message: cannot reach channel {channel}: {why}")
    return ctx.post_message
