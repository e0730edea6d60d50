"""The e-mail surface as a plug-in: built when ``approvals.email_to`` and ``[email]`` are set."""

from __future__ import annotations

from signoff.adapters.email.settings import ADDRESS, EmailSurfaceSettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: EmailSurfaceSettings | None, deps: SurfaceDeps) -> Surface:
    """An `EmailPlatform` (its section is made by the config from [email] + [approvals])."""
    from signoff.adapters.email.platform import EmailPlatform

    if section is None:
        raise ConfigError("email: the surface needs [email] and approvals.email_to")
    return EmailPlatform(settings=section, clock=deps.clock, lookup=deps.lookup)


PLUGIN = SurfacePlugin(
    name="email", build=build, settings=EmailSurfaceSettings, user_id=ADDRESS,
    approver_example="'email:<address>' such as 'email:alice@example.com'",
    describe=lambda section: ", ".join(section.to))
