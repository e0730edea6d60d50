"""The Slack surface as a plug-in: its section, its channels, and how it is built."""

from __future__ import annotations

from signoff.adapters.slack.settings import SlackSettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: SlackSettings | None, deps: SurfaceDeps) -> Surface:
    """A `SlackSurface` for the ``[slack]`` section (the SDK is imported only now)."""
    from signoff.adapters.slack.surface import SlackSurface

    if section is None:
        raise ConfigError("slack: the surface needs a [slack] section")
    return SlackSurface(bot_token=section.bot_token, channel=section.channel,
                         mode=str(section.mode), app_token=section.app_token,
                         signing_secret=section.signing_secret, api_url=section.api_url,
                         replay=deps.replay, clock=deps.clock)


PLUGIN = SurfacePlugin(
    name="slack", build=build, settings=SlackSettings, channel_prefix="slack",
    channel_example="'slack:<channel id>' such as 'slack:C123'",
    # Conversation ids: C… channels, G… private groups, D… direct messages.
    channel_id=r"[CGD][A-Z0-9]+", channel_kind="a conversation id such as 'slack:C0123ABC'",
    user_id=r"[A-Za-z0-9_.-]+", approver_example="'slack:<user id>' such as 'slack:U123'",
    describe=lambda section: section.mode.value)
