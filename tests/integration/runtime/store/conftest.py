"""Fixtures of the store tests: every store backend, opened and empty."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import TaskStore
from signoff.runtime.store.sql.store import SqlTaskStore


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    """Each backend in turn, opened and empty."""
    if request.param == "memory":
        s: TaskStore = MemTaskStore()
    elif request.param == "sqlite":
        s = SqlTaskStore(url=f"sqlite:///{tmp_path / 'store.db'}")
    else:
        s = SqlTaskStore(url=request.getfixturevalue("pg_url"))
    await s.open()
    yield s
    await s.close()
