"""The procrastinate app of bench/cluster.py, in its own module: procrastinate wants its
App importable by name (not defined in ``__main__``), for the bench and its workers alike."""

from __future__ import annotations

from typing import Any

import procrastinate
import sqlalchemy as sa


def make_app(url: str, *, pool_size: int) -> Any:
    """An App on the SQLAlchemy-style ``url`` with one no-op task named "noop"."""
    conninfo = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(
        hide_password=False)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=conninfo, min_size=2, max_size=pool_size))

    @app.task(name="noop")
    async def noop() -> None:
        """Does nothing: only the queue is measured."""

    return app
