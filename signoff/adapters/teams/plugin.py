"""The Teams surface as a plug-in: its section, its conversations, and how it is built."""

from __future__ import annotations

from signoff.adapters.teams.settings import TeamsSettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: TeamsSettings | None, deps: SurfaceDeps) -> Surface:
    """A `TeamsSurface` for the ``[teams]`` section (its HTTP parts imported only now)."""
    from signoff.adapters.teams.surface import TeamsSurface

    if section is None:
        raise ConfigError("teams: the surface needs a [teams] section")
    return TeamsSurface(
        app_id=section.app_id, app_password=section.app_password,
        conversation_id=section.conversation_id, service_url=section.service_url,
        openid_metadata_url=section.openid_metadata_url, token_url=section.token_endpoint,
        tenant_id=section.tenant_id, clock=deps.clock, lookup=deps.lookup,
        replay=deps.ledger())


PLUGIN = SurfacePlugin(
    name="teams", build=build, settings=TeamsSettings, channel_prefix="teams",
    channel_example="'teams:<conversation id>' such as 'teams:19:abc@thread.tacv2'",
    channel_id=r"\S+",
    channel_kind="a conversation id such as 'teams:19:abc@thread.tacv2'",
    # Entra ID (AAD) object ids are GUIDs: activity.from.aadObjectId.
    user_id=r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    approver_example="'teams:<AAD object id>' such as "
                     "'teams:00000000-0000-0000-0000-0000000000a1'")
