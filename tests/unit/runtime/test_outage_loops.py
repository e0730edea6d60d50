"""Outages: which database failures are waited out, and the loops that wait them out."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from signoff.errors import StoreError, StoreFull, StoreReadOnly, StoreUnavailable
from signoff.runtime.clock import FakeClock
from signoff.runtime.outages import Backoff, Finished, Outages, periodic, supervise
from signoff.runtime.store.outage import is_outage, store_error
from tests.e2e.daemons import free_port


def sqlite_failure(db: Path, *setup: str, statement: str,
                   uri: str | None = None) -> sqlite3.Error:
    conn = sqlite3.connect(uri or str(db), uri=uri is not None)
    try:
        for sql in setup:
            conn.execute(sql)
        conn.execute(statement)
        conn.commit()
    except sqlite3.Error as exc:
        return exc
    finally:
        conn.close()
    raise AssertionError("the statement did not fail")


def test_a_full_sqlite_database_is_disk_full(tmp_path: Path) -> None:
    """SQLite's "database or disk is full" is a retryable StoreFull, not a final error."""
    exc = sqlite_failure(tmp_path / "full.db", "CREATE TABLE t (x BLOB)",
                         "PRAGMA max_page_count = 3",
                         statement="INSERT INTO t VALUES (zeroblob(100000))")
    err = store_error(exc, "full.db")
    assert isinstance(err, StoreFull) and err.reason == "disk_full"
    assert "full.db" in str(err) and is_outage(exc)


def test_a_read_only_sqlite_file_is_an_outage(tmp_path: Path) -> None:
    """Writing a database opened read-only is a retryable StoreReadOnly."""
    db = tmp_path / "ro.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    exc = sqlite_failure(db, statement="INSERT INTO t VALUES (1)", uri=f"file:{db}?mode=ro")
    assert isinstance(store_error(exc, "ro.db"), StoreReadOnly)


def test_a_bad_statement_is_final_not_an_outage(tmp_path: Path) -> None:
    """A syntax error is a plain StoreError: retrying would never help."""
    exc = sqlite_failure(tmp_path / "x.db", statement="SELEC nonsense")
    err = store_error(exc, "x.db")
    assert type(err) is StoreError and not is_outage(exc)


def test_no_space_and_read_only_file_systems_are_outages() -> None:
    """ENOSPC is disk full, EROFS read-only, a refused connection unavailable."""
    assert isinstance(store_error(OSError(errno.ENOSPC, "No space left"), "db"), StoreFull)
    assert isinstance(store_error(OSError(errno.EROFS, "Read-only"), "db"), StoreReadOnly)
    assert type(store_error(ConnectionRefusedError(), "db")) is StoreUnavailable


def test_a_postgresql_server_that_is_not_there_is_an_outage() -> None:
    """psycopg's failure to connect (server down, restarting) is a StoreUnavailable, and so
    is SQLAlchemy's wrapping of it."""
    port = free_port()
    with pytest.raises(psycopg.OperationalError) as raw:
        psycopg.connect(f"host=127.0.0.1 port={port} connect_timeout=2")
    assert type(store_error(raw.value, "pg")) is StoreUnavailable
    engine = sa.create_engine(f"postgresql+psycopg://x@127.0.0.1:{port}/x")
    with pytest.raises(sa.exc.OperationalError) as wrapped:
        engine.connect()
    engine.dispose()
    assert type(store_error(wrapped.value, "pg")) is StoreUnavailable


def test_backoff_grows_with_jitter_up_to_its_maximum_and_starts_over() -> None:
    """Delays double up to the maximum, each between half and all of its step."""
    backoff = Backoff(first=1.0, maximum=4.0, rng=lambda: 1.0)
    assert [backoff.next() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    backoff.reset()
    assert Backoff(first=1.0, maximum=4.0, rng=lambda: 0.0).next() == 0.5
    assert backoff.next() == 1.0


def test_backoff_never_starts_past_its_maximum() -> None:
    """A loop that polls rarely (its first step would be a minute) still retries within
    the maximum after a failure."""
    backoff = Backoff(first=60.0, maximum=5.0, rng=lambda: 1.0)
    assert [backoff.next() for _ in range(2)] == [5.0, 5.0]


def test_health_lists_the_database_first_and_says_down_until_a_write_works() -> None:
    """A database outage makes the node "down" until a write works; another failing
    loop only makes it "degraded"."""
    clock = FakeClock()
    outages = Outages(clock)
    assert outages.status() == "ok" and outages.problems() == []
    outages.failed("outbox", RuntimeError("boom"))
    assert outages.status() == "degraded"
    outages.failed("worker", StoreUnavailable("database x is unavailable: gone"))
    assert outages.status() == "down"
    assert outages.problems()[0].startswith("database: database x is unavailable: gone")
    clock.advance(timedelta(seconds=30))
    assert outages.database_down_for() == timedelta(seconds=30)
    outages.database_ok()
    assert outages.status() == "degraded" and outages.database_down_for() is None


async def test_a_periodic_loop_waits_out_failures_and_clears_its_report() -> None:
    """A loop body that fails is retried with back-off, reported meanwhile, and cleared
    from /health by its next success; it never ends the loop."""
    outages = Outages(FakeClock())
    calls: list[int] = []
    seen: list[str] = []
    done = asyncio.Event()

    async def body() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise StoreUnavailable("database x is unavailable: restarting")
        seen.append(outages.status())
        done.set()

    loop = asyncio.create_task(periodic("sweep", body, every=0.001, outages=outages,
                                        backoff=Backoff(first=0.001, maximum=0.002)))
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.sleep(0)
    loop.cancel()
    await asyncio.gather(loop, return_exceptions=True)
    assert seen == ["down"]  # still down: only a write (the heartbeat) ends the outage
    assert [p.split(":")[0] for p in outages.problems()] == ["database"]


async def test_a_periodic_loop_ends_when_its_work_is_over() -> None:
    """A loop whose work is over (a lease another node took) ends by itself, after
    waiting out a failure on the way; its own report is cleared once it worked again."""
    outages = Outages(FakeClock())
    runs: list[str] = []

    async def body() -> None:
        runs.append("run")
        if len(runs) == 1:
            raise StoreUnavailable("database x is unavailable: restarting")
        if len(runs) == 3:
            raise Finished

    await asyncio.wait_for(periodic("lease", body, every=0.001, outages=outages,
                                    backoff=Backoff(first=0.001, maximum=0.002),
                                    wait_first=True), 5)
    assert runs == ["run", "run", "run"]
    assert [p.split(":")[0] for p in outages.problems()] == ["database"]  # not "lease"


async def test_a_service_that_dies_is_restarted_and_reported_meanwhile() -> None:
    """A service that raises is restarted with back-off; /health names it until the new
    run has lasted a while; one that returns is not restarted."""
    outages = Outages(FakeClock())
    starts: list[int] = []
    running = asyncio.Event()

    async def service() -> None:
        starts.append(1)
        if len(starts) == 1:
            raise RuntimeError("surface crashed")
        running.set()
        assert outages.status() == "degraded"
        await asyncio.Event().wait()

    run = asyncio.create_task(supervise("surface-x", service, outages=outages,
                                        backoff=Backoff(first=0.001), healthy_after=0.01))
    await asyncio.wait_for(running.wait(), 5)
    for _ in range(100):
        if outages.status() == "ok":
            break
        await asyncio.sleep(0.01)
    assert outages.status() == "ok" and len(starts) == 2
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)

    async def finishes() -> None:
        starts.append(1)

    await asyncio.wait_for(supervise("once", finishes, outages=outages), 5)
    assert len(starts) == 3
