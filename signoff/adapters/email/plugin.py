"""The e-mail surface as a plug-in: built when ``approvals.email_to`` and ``[email]`` are set."""

from __future__ import annotations

from urllib.parse import urlsplit

from signoff.adapters.email.settings import ADDRESS, EmailSurfaceSettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: EmailSurfaceSettings | None, deps: SurfaceDeps) -> Surface:
    """An `EmailSurface` (its section is made by the config from [email] + [approvals])."""
    from signoff.adapters.email.surface import EmailSurface

    if section is None:
        raise ConfigError("email: the surface needs [email] and approvals.email_to")
    url = section.public_url or deps.public_url
    host = urlsplit(url).hostname if url else None
    if not url or host in (None, "0.0.0.0", "::"):
        raise ConfigError(f"approvals.email_to: the links in the mails need daemon.public_url "
                          f"(the daemon's own address is {url!r})")
    if not deps.secret:
        raise ConfigError("email: the surface needs the daemon's server secret (kept in "
                          "daemon.state_dir) to sign its links")
    return EmailSurface(settings=section.model_copy(update={"public_url": url}),
                         clock=deps.clock, lookup=deps.lookup, secret=deps.secret)


PLUGIN = SurfacePlugin(
    name="email", build=build, settings=EmailSurfaceSettings, user_id=ADDRESS,
    approver_example="'email:<address>' such as 'email:alice@example.com'",
    describe=lambda section: ", ".join(section.to))
