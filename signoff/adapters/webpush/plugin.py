"""The Web Push surface as a plug-in: built when ``[webpush] enabled = true``."""

from __future__ import annotations

from signoff.adapters.webpush.settings import WebPushSettings
from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin
from signoff.errors import ConfigError


def build(section: WebPushSettings | None, deps: SurfaceDeps) -> Surface:
    """A `WebPushSurface` (pywebpush is imported here, not with the config)."""
    from signoff.adapters.webpush.surface import WebPushSurface
    from signoff.adapters.webpush.vapid import load_vapid

    if section is None or not section.enabled:
        raise ConfigError("webpush: the surface needs [webpush] enabled = true")
    if deps.state_dir is None or deps.subscriptions is None or not deps.secret:
        raise ConfigError("webpush: the surface needs the daemon's state dir (VAPID keys, "
                          "server secret) and its store (subscriptions)")
    # Push services accept a mailto: or https: subject only (py_vapid checks it too).
    public = deps.public_url or ""
    subject = section.subject or (public if public.startswith("https://")
                                  else "mailto:signoff@localhost")
    return WebPushSurface(settings=section, clock=deps.clock, lookup=deps.lookup,
                           secret=deps.secret, vapid=load_vapid(deps.state_dir),
                           subscriptions=deps.subscriptions, public_url=deps.public_url,
                           subject=subject)


PLUGIN = SurfacePlugin(
    name="webpush", build=build, settings=WebPushSettings,
    describe=lambda section: ", ".join(r.value for r in section.actions_for) or "open only",
    enabled=lambda section: section.enabled)
