"""Long polls in every store: parked waiters share one status read per re-check, and a
decision committed by another node (which fires nothing here) still answers them."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from signoff.runtime.models import Approval, ApprovalStatus
from signoff.runtime.store.port import Change, TaskStore
from signoff.runtime.watch import ApprovalWatch
from tests.integration.runtime.store.test_store import NOW
from tests.integration.runtime.store.test_store_requests import new, request

WAITERS = 40
BOUND = 30.0  # an upper bound on a wait that ends far sooner, never a sleep


async def test_approval_states_reads_many_requests_at_once(store: TaskStore) -> None:
    """The statuses of many requests come back from one call; unknown ids are left out."""
    for n in range(3):
        assert await store.commit(new(request(n)))
    denied = request(1, status=ApprovalStatus.DENIED)
    assert await store.commit(Change(at=NOW, approval=denied,
                                     approval_expect=ApprovalStatus.PENDING))
    found = await store.approval_states(["a-0", "a-1", "a-2", "a-9"])
    assert found == {"a-0": ApprovalStatus.PENDING, "a-1": ApprovalStatus.DENIED,
                     "a-2": ApprovalStatus.PENDING}
    assert await store.approval_states([]) == {}


class Counted:
    """The store's reads, counted: per-request reads and shared status reads."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.reads = 0
        self.state_reads: list[int] = []  # how many ids each shared read asked about
        self.parked = asyncio.Event()
        self.rechecked = asyncio.Event()

    async def read(self, approval_id: str) -> Approval | None:
        self.reads += 1
        if self.reads == WAITERS:
            self.parked.set()
        return await self.store.get_approval(approval_id)

    async def states(self, ids: Collection[str]) -> dict[str, ApprovalStatus]:
        self.state_reads.append(len(ids))
        if len(self.state_reads) >= 3:
            self.rechecked.set()
        return await self.store.approval_states(ids)


async def test_parked_waiters_cost_one_store_read_per_recheck(store: TaskStore) -> None:
    """N parked long polls make one status read per re-check, not N, and a decision made
    elsewhere reaches its waiter through that read."""
    for n in range(WAITERS):
        assert await store.commit(new(request(n)))
    counted = Counted(store)
    watch = ApprovalWatch(recheck=0.01, states=counted.states)
    waiters = [asyncio.create_task(watch.wait_decided(f"a-{n}", counted.read, BOUND))
               for n in range(WAITERS)]
    async with asyncio.timeout(BOUND):
        await counted.parked.wait()
        await counted.rechecked.wait()
    assert counted.reads == WAITERS  # nobody re-read its own request while parked
    assert counted.state_reads[0] == WAITERS  # one read asked about every waited id
    # Decided by "another node": a commit straight to the store, no fire() here.
    denied = request(7, status=ApprovalStatus.DENIED)
    assert await store.commit(Change(at=NOW, approval=denied,
                                     approval_expect=ApprovalStatus.PENDING))
    async with asyncio.timeout(BOUND):
        answer = await waiters[7]
    assert answer is not None and answer.status is ApprovalStatus.DENIED
    assert counted.reads == WAITERS + 1  # only the woken waiter read its request again
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert watch.waiting == 0


async def test_a_decision_fired_here_answers_without_a_recheck(store: TaskStore) -> None:
    """On the node that decided, the waiter answers at once with the committed request:
    no shared read, and no read of its own request back."""
    assert await store.commit(new(request(1)))
    counted = Counted(store)
    watch = ApprovalWatch(recheck=BOUND, states=counted.states)
    waiter = asyncio.create_task(watch.wait_decided("a-1", counted.read, BOUND))
    while watch.waiting == 0 or counted.reads == 0:
        await asyncio.sleep(0)
    approved = request(1, status=ApprovalStatus.APPROVED)
    assert await store.commit(Change(at=NOW, approval=approved,
                                     approval_expect=ApprovalStatus.PENDING))
    watch.fire("a-1", approved)
    async with asyncio.timeout(BOUND):
        answer = await waiter
    assert answer is not None and answer.status is ApprovalStatus.APPROVED
    assert counted.state_reads == []
    assert counted.reads == 1  # the first look only: the answer came with the wake-up
