"""The daemon mounts each surface's own routes, and only under ``/<surface name>/``:
they are served without the API key, so a surface may not shadow an API route."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from starlette.requests import Request
from starlette.responses import Response

from signoff.bot.ports import Route, Surface
from signoff.errors import ConfigError
from signoff.testing import RecordingSurface
from signoff.wiring.daemon import surface_routes


async def endpoint(request: Request) -> Response:
    return Response(status_code=204)


@dataclass
class Serving(RecordingSurface):
    """A recording surface that serves the given paths."""

    paths: tuple[str, ...] = ()

    def routes(self) -> tuple[Route, ...]:
        return tuple(Route("POST", path, endpoint) for path in self.paths)


def test_routes_of_every_surface_are_mounted() -> None:
    """Each surface's routes under its own prefix are all in the route table."""
    surfaces: dict[str, Surface] = {
        "hooks": Serving(name="hooks", paths=("/hooks/events", "/hooks/other")),
        "quiet": RecordingSurface(name="quiet")}
    assert [r.path for r in surface_routes(surfaces)] == ["/hooks/events", "/hooks/other"]


@pytest.mark.parametrize("path", ["/tasks", "/hook/events", "/hooksevents", "/"])
def test_a_route_outside_its_own_prefix_is_refused(path: str) -> None:
    """A surface claiming a path outside /<name>/ stops the daemon with a clear error."""
    with pytest.raises(ConfigError, match=rf"surface 'hooks' serves POST {path}: .* /hooks/"):
        surface_routes({"hooks": Serving(name="hooks", paths=(path,))})
