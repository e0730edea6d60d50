"""The Discord surface as a plug-in: its section, its channels, and how it is built."""

from __future__ import annotations

from signoff.adapters.discord.settings import DiscordSettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: DiscordSettings | None, deps: SurfaceDeps) -> Surface:
    """A `DiscordSurface` for the ``[discord]`` section (httpx and cryptography only now)."""
    from signoff.adapters.discord.surface import DiscordSurface

    if section is None:
        raise ConfigError("discord: the surface needs a [discord] section")
    return DiscordSurface(application_id=section.application_id,
                           public_key=section.public_key, bot_token=section.bot_token,
                           channel_id=section.channel_id, api_base=section.api_base,
                           clock=deps.clock, replay=deps.ledger())


PLUGIN = SurfacePlugin(
    name="discord", build=build, settings=DiscordSettings, channel_prefix="discord",
    channel_example="'discord:<channel id>' such as 'discord:1234567890123456789'",
    channel_id=r"\d{1,20}",
    channel_kind="a channel id such as 'discord:1234567890123456789'",
    user_id=r"\d{1,20}",
    approver_example="'discord:<user id>' such as 'discord:80351110224678912'",
    describe=lambda section: "interactions")
