"""PgTaskStore on the machine's PostgreSQL: a cancelled call is never carried on as if
nobody had asked it to stop (a worker that went on after its cancel kept a daemon's
shutdown, and the three-node scheduler test, waiting forever)."""

from __future__ import annotations

import asyncio

import pytest

from signoff.runtime.store.postgres.store import PgTaskStore

pytestmark = pytest.mark.postgres


async def test_a_cancel_landing_as_a_pooled_connection_frees_up_stops_the_call(
        pg_url: str) -> None:
    """A call waiting for a connection of its full pool is cancelled at every moment
    around the one when a connection is handed back: each time it either had already
    finished or ends cancelled. (On Python 3.11 the pool's wait, an asyncio.wait_for,
    returned the connection and dropped a cancel landing in that moment.)"""
    store = PgTaskStore(url=pg_url, pool_size=2)  # two connections, both held below
    await store.open()
    try:
        for ticks in range(12):
            held = [await store._apool.getconn() for _ in range(2)]
            call = asyncio.create_task(store.get_task("t-none"))
            for _ in range(10):  # until it waits for a connection
                await asyncio.sleep(0)
            assert not call.done()
            await store._apool.putconn(held.pop())
            for _ in range(ticks):
                await asyncio.sleep(0)
            if call.cancel():  # still going: the cancel must end it
                with pytest.raises(asyncio.CancelledError):
                    await call
            else:
                assert await call is None
            await store._apool.putconn(held.pop())
    finally:
        await store.close()
