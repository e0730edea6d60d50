"""The ntfy surface as a plug-in: built when the config has an ``[ntfy]`` section."""

from __future__ import annotations

from urllib.parse import urlsplit

from signoff.adapters.ntfy.settings import TOPIC, NtfySettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: NtfySettings | None, deps: SurfaceDeps) -> Surface:
    """An `NtfySurface` (httpx only)."""
    from signoff.adapters.ntfy.surface import NtfySurface

    if section is None:
        raise ConfigError("ntfy: the surface needs an [ntfy] section")
    url = deps.public_url
    if not url or urlsplit(url).hostname in (None, "0.0.0.0", "::"):
        raise ConfigError(f"ntfy: the buttons need daemon.public_url (the daemon's own "
                          f"address is {url!r})")
    if not deps.secret:
        raise ConfigError("ntfy: the surface needs the daemon's server secret to sign "
                          "its buttons")
    return NtfySurface(settings=section, clock=deps.clock, lookup=deps.lookup,
                        secret=deps.secret, public_url=url)


PLUGIN = SurfacePlugin(
    name="ntfy", build=build, settings=NtfySettings, user_id=TOPIC,
    approver_example="'ntfy:<topic>' such as 'ntfy:alice-approvals'",
    describe=lambda section: f"{section.url}/{section.topic}")
