"""Slack approval surface: Block Kit cards with Once / Session / Always / Deny buttons.

`SlackPlatform` implements `signoff.bot.ports.ChatPlatform` in socket or http mode;
`blocks` renders cards; the Slack SDKs are imported only inside this package.
"""

from __future__ import annotations

from signoff.adapters.slack.platform import SlackPlatform

__all__ = ["SlackPlatform"]
