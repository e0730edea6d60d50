"""Finding the surfaces: every `SurfacePlugin` registered under ``signoff.surfaces``.

signoff registers its own four (slack, telegram, web, terminal) in its pyproject exactly
as another package registers one, so the config, the wiring and the daemon know surfaces
only through this registry::

    [project.entry-points."signoff.surfaces"]
    discord = "signoff_discord:PLUGIN"

A plug-in that fails to load is skipped with a warning, and remembered with the reason:
a config section naming it then says why instead of "unknown section".
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

from signoff.bot.ports import SurfacePlugin

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "signoff.surfaces"
# A surface name is a config section, an actor prefix and a URL segment all at once.
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class SurfaceRegistry:
    """The surfaces installed here, web (always built) first, then by name."""

    plugins: Mapping[str, SurfacePlugin[Any]]
    broken: Mapping[str, str]  # entry point name -> why it did not load

    def sections(self) -> dict[str, type[BaseModel]]:
        """Config section name -> its model, for every surface that has a section."""
        return {name: p.settings for name, p in self.plugins.items() if p.settings is not None}

    def by_prefix(self, prefix: str) -> SurfacePlugin[Any] | None:
        """The surface whose channels are written ``<prefix>:<id>``."""
        return next((p for p in self.plugins.values() if p.channel_prefix == prefix), None)

    def channel_plugins(self) -> list[SurfacePlugin[Any]]:
        """The surfaces that have channels (a `channel_prefix`)."""
        return [p for p in self.plugins.values() if p.channel_prefix]


def surface_registry() -> SurfaceRegistry:
    """The registry for the current ``sys.path`` (found once per path, then reused)."""
    return _discover(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _discover(path: tuple[str, ...]) -> SurfaceRegistry:
    # Keyed by sys.path so that a package made importable later (a test's target dir)
    # is found; entry_points() itself reads the distributions on that path.
    found: dict[str, SurfacePlugin[Any]] = {}
    broken: dict[str, str] = {}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            plugin = ep.load()
            _check(ep.name, plugin, found)
        except Exception as exc:  # a plug-in may raise anything; it must not stop us
            reason = f"{type(exc).__name__}: {exc}"
            broken.setdefault(ep.name, reason)
            log.warning(f"surface_plugin_skipped entry_point={ep.name} value={ep.value} "
                        f"error={reason}")
            continue
        found[plugin.name] = plugin
    ordered = sorted(found.values(), key=lambda p: (not p.always, p.name))
    return SurfaceRegistry(plugins={p.name: p for p in ordered}, broken=broken)


def _check(name: str, plugin: object, found: Mapping[str, SurfacePlugin[Any]]) -> None:
    if not isinstance(plugin, SurfacePlugin):
        raise TypeError(f"expected a signoff.bot.ports.SurfacePlugin, got {type(plugin).__name__}")
    if plugin.name != name or not _NAME.fullmatch(name):
        raise ValueError(f"the entry point must be named after the surface, a lowercase "
                         f"identifier ({plugin.name!r} registered as {name!r})")
    if name in found:
        raise ValueError(f"another package already registered the surface {name!r}")
    prefix = plugin.channel_prefix
    if prefix is not None and not _NAME.fullmatch(prefix):
        raise ValueError(f"channel prefix {prefix!r} is not a lowercase identifier")
    if prefix is not None and any(p.channel_prefix == prefix for p in found.values()):
        raise ValueError(f"the channel prefix {prefix!r} is already taken")
