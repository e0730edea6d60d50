"""The web console as a plug-in: no section, no channels, built by every daemon."""

from __future__ import annotations

from pydantic import BaseModel

from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin


def build(section: BaseModel | None, deps: SurfaceDeps) -> Surface:
    """The console's `WebSurface` (its pages and forms are the API's routes)."""
    from signoff.adapters.web.surface import WebSurface

    return WebSurface()


PLUGIN: SurfacePlugin[BaseModel] = SurfacePlugin(name="web", build=build, always=True)
