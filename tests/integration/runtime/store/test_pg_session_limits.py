"""PostgreSQL sessions of the store never wait forever behind a paused node's lock."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from signoff.errors import StoreUnavailable
from signoff.runtime.store.outage import store_error
from signoff.runtime.store.postgres.notify import libpq_url
from signoff.runtime.store.postgres.store import PgTaskStore
from signoff.runtime.store.sql.rows import IDLE_IN_TRANSACTION, LOCK_TIMEOUT

pytestmark = pytest.mark.postgres


async def test_every_store_session_has_a_lock_timeout_and_an_idle_transaction_limit(
        pg_url: str) -> None:
    """Both of the store's connection pools (SQLAlchemy's and the hot path's) set
    lock_timeout and idle_in_transaction_session_timeout, so a node frozen inside a
    transaction is cut off by the server and nobody hangs behind it."""
    store = PgTaskStore(url=pg_url)
    await store.open()
    try:
        async with store._apool.connection() as conn:  # the hot path's pool
            cur = await conn.execute("SELECT current_setting('lock_timeout'), "
                                     "current_setting('idle_in_transaction_session_timeout')")
            hot = await cur.fetchone()

        def settings() -> tuple[str, str]:  # SQLAlchemy's, for every other unit of work
            with store._tx(write=False) as conn:
                row = conn.execute(sa.text(
                    "SELECT current_setting('lock_timeout'), "
                    "current_setting('idle_in_transaction_session_timeout')")).one()
                return str(row[0]), str(row[1])

        cold = await store._run(settings)
    finally:
        await store.close()
    assert hot == cold == (LOCK_TIMEOUT, IDLE_IN_TRANSACTION)


async def test_a_lock_wait_cut_off_by_lock_timeout_is_a_retryable_outage(pg_url: str) -> None:
    """Waiting behind a transaction that holds the audit chain's head row (a node paused
    mid-commit) ends at lock_timeout as a retryable outage (503, retried by loops), not a
    final error and not an endless wait."""
    store = PgTaskStore(url=pg_url)
    await store.open()
    holder = psycopg.connect(libpq_url(pg_url))
    try:
        holder.execute("SET idle_in_transaction_session_timeout = 0")
        holder.execute("SELECT 1 FROM audit_head WHERE id = 1 FOR UPDATE")
        async with store._apool.connection() as conn:
            await conn.execute("SET lock_timeout = '100ms'")  # the test need not wait 10 s
            with pytest.raises(psycopg.errors.LockNotAvailable) as waited:
                await conn.execute("SELECT 1 FROM audit_head WHERE id = 1 FOR UPDATE")
            await conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        assert isinstance(store_error(waited.value, "db"), StoreUnavailable)
    finally:
        holder.close()
        await store.close()
