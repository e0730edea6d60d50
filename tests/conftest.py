"""Shared fixtures: databases (a fresh PostgreSQL database per test), settings and nodes.

    async def test_x(node_factory):
        node = await node_factory({"approvals": {"timeout": "5m"}})
        platform = node.surfaces["recording"]    # a RecordingSurface, already attached

PostgreSQL comes from ``SIGNOFF_TEST_POSTGRES`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). When it cannot be reached the
tests that need it are skipped with the reason, unless ``SIGNOFF_REQUIRE_POSTGRES=1``
(CI), which turns the skip into a failure.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from signoff.bot.ports import Surface
from signoff.config.settings import Settings
from signoff.runtime.clock import Clock
from signoff.runtime.planning.planner import Planner
from signoff.runtime.store.port import TaskStore
from signoff.testing import RecordingSurface
from signoff.wiring import Node, build_node

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_APPROVERS = ("recording:alice",)

SettingsFactory = Callable[..., Settings]
NodeFactory = Callable[..., Awaitable[Node]]


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``extra``, merging nested tables instead of replacing them."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _admin_connect(url: sa.engine.URL) -> Any:
    import psycopg

    return psycopg.connect(host=url.host or "127.0.0.1", port=url.port or 5432,
                           user=url.username, password=url.password,
                           dbname=url.database or "postgres", autocommit=True,
                           connect_timeout=3)


@pytest.fixture(autouse=True)
def _root_logger_as_it_was() -> Iterator[None]:
    """A CLI command run in this process (`signoff tools`, `signoff daemon start`) sets up logging
    for the whole process, as it should in its own; give the next test the root logger's
    handlers and level back, whichever worker runs it next."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A SQLAlchemy URL of a brand-new PostgreSQL database, dropped after the test."""
    base = sa.engine.make_url(os.environ.get("SIGNOFF_TEST_POSTGRES", DEFAULT_POSTGRES))
    try:
        admin = _admin_connect(base)
    except Exception as exc:  # ImportError (no psycopg) or any connection failure
        reason = (f"PostgreSQL unreachable at "
                  f"{base.render_as_string(hide_password=True)}: {exc}")
        if os.environ.get("SIGNOFF_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    name = f"signoff_t_{secrets.token_hex(6)}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with _admin_connect(base) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLAlchemy URL of a SQLite file in the test's temporary directory."""
    return f"sqlite:///{tmp_path / 'signoff-test.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    """The URL of a fresh database, once on SQLite and once on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def settings_factory(tmp_path: Path) -> SettingsFactory:
    """Build `Settings` with the work dir in tmp_path, deep-merged with overrides."""

    def make(overrides: Mapping[str, Any] | None = None, **sections: Any) -> Settings:
        data = {"daemon": {"work_dir": str(tmp_path / "work")}}
        data = deep_merge(data, overrides or {})
        data = deep_merge(data, sections)
        return Settings.model_validate(data)

    return make


@pytest.fixture
async def node_factory(settings_factory: SettingsFactory) -> AsyncIterator[NodeFactory]:
    """Build opened nodes with a RecordingSurface "recording" (approver recording:alice)."""
    nodes: list[Node] = []

    async def make(overrides: Mapping[str, Any] | None = None, *,
                   settings: Settings | None = None, store: TaskStore | None = None,
                   database: str | None = None, clock: Clock | None = None,
                   planner: Planner | None = None,
                   surfaces: dict[str, Surface] | None = None,
                   approvers: tuple[str, ...] = DEFAULT_APPROVERS) -> Node:
        chosen = settings or settings_factory(overrides)
        picked = surfaces if surfaces is not None else {"recording": RecordingSurface()}
        node = build_node(chosen, store=store, database=database, clock=clock,
                          planner=planner, surfaces=picked)
        # The config only accepts slack:/telegram: approvers; the recorder has its own.
        node.authorizer.approvers = node.authorizer.approvers | frozenset(approvers)
        await node.store.open()
        nodes.append(node)
        for surface in picked.values():
            if isinstance(surface, RecordingSurface):
                surface.attach(node.flow.on_decision)
        return node

    yield make
    for node in nodes:
        await node.mcp.stop()  # MCP servers a test started (a no-op otherwise)
        await node.store.close()
