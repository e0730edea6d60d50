"""Leadership by advisory lock and the replay ledger, on the machine's PostgreSQL (and the
single-node versions): one leader at a time, a lost session is lost leadership and is
taken over, and a request key is first seen by exactly one of several nodes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest

from signoff.runtime.clock import FakeClock
from signoff.runtime.leadership import Lease, SoleLeadership
from signoff.runtime.replay import MemoryReplayLedger, ReplayLedger
from signoff.runtime.store.postgres.leader import APPLICATION_PREFIX, PgLeadership
from signoff.runtime.store.postgres.notify import libpq_url
from signoff.runtime.store.postgres.replay import SqlReplayLedger

TTL = timedelta(minutes=10)


def leadership(pg_url: str, node: str) -> PgLeadership:
    return PgLeadership(url=pg_url, node_id=node, retry=0.05, ping=0.1)


async def leads(ship: PgLeadership, name: str, held: list[str], release: asyncio.Event,
                lost: list[str]) -> None:
    """Hold ``name`` until ``release`` is set or the lease is lost, noting both."""
    async with ship.hold(name) as lease:
        held.append(ship.node_id)
        waits = {asyncio.ensure_future(release.wait()), asyncio.ensure_future(lease.wait_lost())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if lease.lost.is_set():
            lost.append(ship.node_id)


@pytest.mark.postgres
async def test_one_node_leads_and_the_next_takes_over_when_it_lets_go(pg_url: str) -> None:
    """Three nodes ask for one lease: one holds it; when it releases, exactly one other."""
    held: list[str] = []
    lost: list[str] = []
    releases = {n: asyncio.Event() for n in ("a", "b", "c")}
    tasks = [asyncio.create_task(leads(leadership(pg_url, n), "telegram-polling", held,
                                       releases[n], lost)) for n in releases]
    try:
        while not held:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # the standbys have retried a few times meanwhile
        assert len(held) == 1
        releases[held[0]].set()
        while len(held) < 2:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        assert len(held) == 2 and held[0] != held[1]
        assert lost == []
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.postgres
async def test_a_killed_leader_session_is_lost_leadership_and_is_taken_over(pg_url: str) -> None:
    """pg_terminate_backend on the leader's session: it learns it lost the lease, and a
    standby takes it over."""
    held: list[str] = []
    lost: list[str] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(leads(leadership(pg_url, n), "lease", held, release, lost))
             for n in ("a", "b")]
    try:
        while not held:
            await asyncio.sleep(0.02)
        leader = held[0]
        async with await psycopg.AsyncConnection.connect(libpq_url(pg_url),
                                                         autocommit=True) as admin:
            cur = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database()",
                (f"{APPLICATION_PREFIX}{leader}",))
            assert await cur.fetchall() == [(True,)]
        while len(held) < 2 or not lost:
            await asyncio.sleep(0.02)
        assert lost == [leader] and held[1] != leader
    finally:
        release.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_sole_node_always_leads_and_never_loses_it() -> None:
    """SQLite and the memory store have one node: the lease is given at once, for good."""
    async with SoleLeadership(node_id="solo").hold("telegram-polling") as lease:
        assert isinstance(lease, Lease)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await lease.wait_lost()


@pytest.fixture
async def ledgers(pg_url: str) -> AsyncIterator[list[SqlReplayLedger]]:
    clock = FakeClock()
    made = [SqlReplayLedger(url=pg_url, clock=clock) for _ in range(3)]
    yield made
    for ledger in made:
        await ledger.close()


@pytest.mark.postgres
async def test_a_request_key_is_first_seen_by_exactly_one_of_three_nodes(
        ledgers: list[SqlReplayLedger]) -> None:
    """The same key offered by three nodes at once, many times: one True each time."""
    for n in range(30):
        keys = [f"slack:sig:{n}:v0=abc"]
        answers = await asyncio.gather(*(ledger.first_time(keys, ttl=TTL) for ledger in ledgers))
        assert sorted(answers) == [False, False, True], n


@pytest.mark.postgres
async def test_a_retried_event_with_a_new_signature_is_a_replay_by_its_event_id(
        ledgers: list[SqlReplayLedger]) -> None:
    """Slack retries an event with a new timestamp and signature: its event id gives it away."""
    a, b, _ = ledgers
    assert await a.first_time(["slack:sig:1:v0=one", "slack:event:Ev1"], ttl=TTL)
    assert not await b.first_time(["slack:sig:2:v0=two", "slack:event:Ev1"], ttl=TTL)
    assert await b.first_time(["slack:sig:3:v0=three", "slack:event:Ev2"], ttl=TTL)


async def expiring(ledger: ReplayLedger, clock: FakeClock) -> None:
    assert await ledger.first_time(["k"], ttl=timedelta(minutes=10))
    clock.advance(timedelta(minutes=9))
    assert not await ledger.first_time(["k"], ttl=timedelta(minutes=10))
    clock.advance(timedelta(minutes=2))
    assert await ledger.first_time(["k"], ttl=timedelta(minutes=10)), "expired keys are new"


@pytest.mark.postgres
async def test_the_shared_ledger_forgets_keys_after_their_ttl_and_prunes_them(
        pg_url: str) -> None:
    """By the node's Clock: a key is a replay within its ttl, new after it; old rows go."""
    clock = FakeClock()
    ledger = SqlReplayLedger(url=pg_url, clock=clock)
    try:
        await expiring(ledger, clock)
        for n in range(5):
            assert await ledger.first_time([f"old-{n}"], ttl=timedelta(seconds=30))
        clock.advance(timedelta(minutes=5))
        assert await ledger.first_time(["fresh"], ttl=timedelta(minutes=10))
        assert await ledger.count() == 2  # "k" (renewed) and "fresh"; the old ones pruned
    finally:
        await ledger.close()


async def test_the_memory_ledger_forgets_keys_after_their_ttl() -> None:
    """One process's ledger follows the same rule by its Clock."""
    clock = FakeClock()
    await expiring(MemoryReplayLedger(clock=clock), clock)
