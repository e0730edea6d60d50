"""The terminal as a plug-in: no section and not `always`, so no daemon builds it.

`signoff handle` asks at its own terminal; registering the surface anyway keeps the
list of surfaces in one place (the ``signoff.surfaces`` entry points).
"""

from __future__ import annotations

from pydantic import BaseModel

from signoff.bot.ports import Surface, SurfaceDeps, SurfacePlugin


def build(section: BaseModel | None, deps: SurfaceDeps) -> Surface:
    """A `TerminalSurface` on this process's stdin and stdout."""
    from signoff.adapters.terminal.surface import TerminalSurface

    return TerminalSurface()


PLUGIN: SurfacePlugin[BaseModel] = SurfacePlugin(name="terminal", build=build)
