"""The Telegram surface as a plug-in: its section, its chats, and how it is built."""

from __future__ import annotations

from signoff.adapters.telegram.settings import TelegramMode, TelegramSettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: TelegramSettings | None, deps: SurfaceDeps) -> Surface:
    """A `TelegramSurface` for the ``[telegram]`` section (the SDK is imported only now)."""
    from signoff.adapters.telegram.surface import TelegramSurface

    if section is None:
        raise ConfigError("telegram: the surface needs a [telegram] section")
    return TelegramSurface(
        bot_token=section.bot_token, chat_id=section.chat_id,
        mode="webhook" if section.mode is TelegramMode.WEBHOOK else "polling",
        base_url=section.base_url, base_file_url=section.base_file_url,
        webhook_secret=section.webhook_secret, webhook_url=section.webhook_url,
        pending_lister=deps.pending, leadership=deps.lead(), replay=deps.ledger())


PLUGIN = SurfacePlugin(
    name="telegram", build=build, settings=TelegramSettings, channel_prefix="telegram",
    channel_example="'telegram:<chat id>' such as 'telegram:-100123'",
    # Chat ids (negative for groups and channels) or a public @username.
    channel_id=r"-?\d{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31}",
    channel_kind="a chat id such as 'telegram:-100123' or 'telegram:@channelname'",
    user_id=r"-?\d+", approver_example="'telegram:<numeric user id>' such as 'telegram:42'",
    describe=lambda section: section.mode.value)
