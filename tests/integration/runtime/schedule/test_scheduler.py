"""The scheduler on real stores: recording fires, skips, catch-up, and exactly-once on
several nodes sharing one database (SQLite file and PostgreSQL)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from signoff.errors import ConfigError
from signoff.runtime.models import Approval, RunMode, Task, TaskState
from signoff.runtime.schedule.scheduler import Scheduler, schedule_timeouts
from signoff.wiring import Node

LIST = [{"tool": "list_dir", "args": {"path": "."}}]
NIGHTLY = {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "steps": LIST}
T = datetime(2026, 11, 30, 2, 0, 0, 123456, tzinfo=UTC)  # 03:00 in Berlin


class Events:
    """An engine listener that records task events and lets a test wait for them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Task, str | None]] = []
        self._changed = asyncio.Event()

    async def approval_requested(self, task: Task, approval: Approval) -> None:
        """Ignored."""

    async def approval_decided(self, task: Task, approval: Approval) -> None:
        """Ignored."""

    async def task_event(self, kind: str, task: Task, detail: str | None = None) -> None:
        """Record and wake waiters."""
        self.seen.append((kind, task, detail))
        self._changed.set()

    def kinds(self, kind: str) -> list[Task]:
        """Tasks of the events of one kind."""
        return [t for k, t, _ in self.seen if k == kind]

    async def wait(self, ready: Callable[[], bool], timeout: float = 6.0) -> None:
        """Until ``ready()`` holds (woken by events, not by polling)."""
        async with asyncio.timeout(timeout):
            while not ready():
                self._changed.clear()
                await self._changed.wait()


async def make(node_factory: Any, *schedules: dict[str, Any], **kw: Any) -> tuple[Node, Scheduler,
                                                                                   Events]:
    """A node with these schedules, its Scheduler and an event recorder."""
    overrides = kw.pop("overrides", {})
    node = await node_factory({"schedules": list(schedules), **overrides}, **kw)
    events = Events()
    node.listener.add(events)
    return node, Scheduler(engine=node.engine, wake=node.worker.wake,
                           schedules=[s.to_runtime() for s in node.settings.schedules]), events


async def tasks_of(node: Node, name: str) -> list[Task]:
    """Every task of one schedule, newest first."""
    page = await node.store.list_tasks(schedule=name, limit=500)
    return [t for t in page.items if isinstance(t, Task)]


async def run_to_end(node: Node) -> Task:
    """Claim the oldest queued task and advance it (no worker needed)."""
    cfg = node.engine.config
    task = await node.store.claim_next(cfg.node_id, node.engine.clock.now() + cfg.lease)
    assert task is not None
    return await node.engine.advance(task)


async def test_fire_records_a_queued_scheduled_task(node_factory: Any) -> None:
    """A fire inserts a queued SCHEDULED task keyed by its fire time (second, UTC)."""
    node, sched, events = await make(node_factory, {**NIGHTLY, "cron_mode": "ask"})
    task = await sched.fire("nightly", T)
    assert task is not None
    stored = await node.store.get_task(task.id)
    assert stored is not None
    assert (stored.state, stored.mode, stored.schedule, stored.cron_mode) == (
        TaskState.QUEUED, RunMode.SCHEDULED, "nightly", "ask")
    assert stored.fire_time == datetime(2026, 11, 30, 2, 0, 0, tzinfo=UTC)
    assert stored.policy_id == "nightly"
    assert [t.id for t in events.kinds("queued")] == [task.id]


async def test_inherited_cron_mode_is_left_to_the_policy(node_factory: Any) -> None:
    """Without its own cron_mode a schedule stores None (approvals.cron_mode applies)."""
    _, sched, _ = await make(node_factory, NIGHTLY)
    task = await sched.fire("nightly", T)
    assert task is not None and task.cron_mode is None


async def test_second_fire_of_the_same_time_is_a_no_op(node_factory: Any) -> None:
    """The same fire time twice (another node, a catch-up) records one task."""
    node, sched, _ = await make(node_factory, NIGHTLY)
    assert await sched.fire("nightly", T) is not None
    assert await sched.fire("nightly", T + timedelta(microseconds=5)) is None
    assert len(await tasks_of(node, "nightly")) == 1


async def test_run_still_going_skips_the_next_fire_visibly(node_factory: Any,
                                                           caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    """A fire while the previous run is queued is skipped with a log line and an event."""
    node, sched, events = await make(node_factory, NIGHTLY)
    first = await sched.fire("nightly", T)
    assert first is not None
    with caplog.at_level(logging.WARNING, logger="signoff.runtime.schedule.scheduler"):
        assert await sched.fire("nightly", T + timedelta(days=1)) is None
    assert len(await tasks_of(node, "nightly")) == 1
    [(_kind, subject, detail)] = [e for e in events.seen if e[0] == "skipped"]
    assert subject.id == first.id
    assert detail == (f"run due 2026-12-01 02:00:00 UTC skipped: the previous run {first.id} "
                      "is still queued")
    assert any(r.message == "schedule_skipped" for r in caplog.records)


async def test_ticks_a_late_job_let_pass_are_named(node_factory: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """An every-second job that took tick 1 and is next called only at tick 5 (a stalled
    loop) takes tick 5; the three it let pass are each logged as ``schedule_coalesced``."""
    _, sched, _ = await make(node_factory, {"name": "tick", "every": "1s", "steps": LIST})
    start = datetime.now(UTC).replace(microsecond=0)
    with caplog.at_level(logging.INFO, logger="signoff.runtime.schedule.scheduler"):
        sched._log_coalesced("tick", start)
        sched._log_coalesced("tick", start + timedelta(seconds=1))  # on time: nothing
        sched._log_coalesced("tick", start + timedelta(seconds=5))
    named = [r.__dict__["fire_time"] for r in caplog.records
             if r.message == "schedule_coalesced"]
    assert named == [(start + timedelta(seconds=n)).isoformat() for n in (2, 3, 4)]


async def test_a_finished_run_does_not_block_the_next(node_factory: Any) -> None:
    """Once the previous run completed, the next fire records a new run."""
    node, sched, _ = await make(node_factory, NIGHTLY)
    assert await sched.fire("nightly", T) is not None
    assert (await run_to_end(node)).state is TaskState.COMPLETED
    assert await sched.fire("nightly", T + timedelta(days=1)) is not None


async def test_disabled_schedule_is_listed_but_never_fires(node_factory: Any) -> None:
    """enabled = false: described (no next times), not fired, no APScheduler job."""
    _node, sched, _ = await make(node_factory, {**NIGHTLY, "enabled": False},
                                {"name": "tick", "every": "1h", "steps": LIST})
    [off, on] = sched.describe(T)
    assert (off["name"], off["enabled"], off["next_utc"]) == ("nightly", False, [])
    assert on["enabled"] and len(on["next_utc"]) == 3
    assert await sched.fire("nightly", T) is None
    runner = asyncio.create_task(sched.run())
    try:
        await asyncio.wait_for(sched.started.wait(), 5)
        assert sched.job_ids() == ["tick"]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    assert sched.job_ids() == []


async def test_describe_gives_next_fire_times_in_utc_and_the_schedule_zone(node_factory: Any
                                                                           ) -> None:
    """Next three fire times, in UTC and in Europe/Berlin."""
    _, sched, _ = await make(node_factory, NIGHTLY)
    [row] = sched.describe(datetime(2026, 11, 29, 12, tzinfo=UTC))
    assert row["next_utc"] == ["2026-11-30T02:00:00+00:00", "2026-12-01T02:00:00+00:00",
                               "2026-12-02T02:00:00+00:00"]
    assert row["next_local"][0] == "2026-11-30T03:00:00+01:00"
    assert (row["cron"], row["every"], row["cron_mode"]) == ("0 3 * * *", None, "deny")


async def test_status_shows_the_last_run_and_its_outcome(node_factory: Any) -> None:
    """`status` adds the newest run of each schedule with its outcome."""
    node, sched, _ = await make(
        node_factory, NIGHTLY,
        {"name": "cleanup", "every": "1d", "steps": [
            {"tool": "send_webhook", "args": {"url": "http://127.0.0.1:9/x", "payload": {}}}]})
    assert (await sched.status(T))[0]["last_run"] is None
    done = await sched.fire("nightly", T)
    await run_to_end(node)
    blocked = await sched.fire("cleanup", T)
    await run_to_end(node)
    rows = {r["name"]: r["last_run"] for r in await sched.status(T)}
    assert done is not None and blocked is not None
    assert rows["nightly"]["task_id"] == done.id and rows["nightly"]["outcome"] == "completed"
    assert rows["cleanup"]["state"] == "failed"
    assert rows["cleanup"]["outcome"].startswith("blocked: needs approval but cron_mode is deny")


async def test_run_now_queues_a_run_without_a_fire_time(node_factory: Any) -> None:
    """`run_now` always queues (twice → two runs), even for a disabled schedule."""
    node, sched, _ = await make(node_factory, {**NIGHTLY, "enabled": False})
    first = await sched.run_now("nightly", submitted_by="cli")
    second = await sched.run_now("nightly")
    assert first.fire_time is None and first.mode is RunMode.SCHEDULED
    assert first.submitted_by == "cli"
    assert {t.id for t in await tasks_of(node, "nightly")} == {first.id, second.id}
    with pytest.raises(ValueError, match="no schedule named 'nope'"):
        await sched.run_now("nope")


async def test_unknown_tool_in_steps_is_a_config_error(node_factory: Any) -> None:
    """A schedule step naming an unknown tool fails at start, naming the key."""
    with pytest.raises(ConfigError, match=r"schedules\[0\]\.steps\[1\]"):
        # The wiring may build the scheduler itself; either way it is refused.
        node = await node_factory({"schedules": [{**NIGHTLY, "steps": [
            {"tool": "list_dir", "args": {"path": "."}}, {"tool": "fax", "args": {}}]}]})
        Scheduler(engine=node.engine, schedules=[s.to_runtime() for s in node.settings.schedules])


async def test_schedule_timeouts_per_schedule(node_factory: Any) -> None:
    """A schedule's own timeout applies to its runs only."""
    node, sched, _ = await make(node_factory, {**NIGHTLY, "timeout": "2h"})
    timeout_for = schedule_timeouts([s.to_runtime() for s in node.settings.schedules])
    task = await sched.fire("nightly", T)
    assert task is not None and timeout_for(task) == timedelta(hours=2)
    assert timeout_for(Task(id="x", goal="g", schedule="nightly")) is None  # not scheduled


# -- APScheduler for real (kept to a couple of seconds) -------------------------------------------


async def run_services(*services: Callable[[], Any]) -> list[asyncio.Task[Any]]:
    """Start long-running coroutines in the background."""
    return [asyncio.create_task(service()) for service in services]


async def stop(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel and wait."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_every_one_second_fires_on_whole_seconds(node_factory: Any) -> None:
    """`every = "1s"`: consecutive runs one second apart, each recorded once."""
    node, sched, events = await make(node_factory, {"name": "tick", "every": "1s",
                                                    "steps": LIST})
    background = await run_services(sched.run, node.worker.run)
    try:
        await events.wait(lambda: len(events.kinds("completed")) >= 2)
    finally:
        await stop(background)
    fires = sorted(t.fire_time for t in await tasks_of(node, "tick") if t.fire_time)
    assert len(fires) >= 2 and len(set(fires)) == len(fires)
    assert all(f.microsecond == 0 for f in fires)
    assert all((b - a) % timedelta(seconds=1) == timedelta() for a, b in itertools.pairwise(fires))


async def test_jittered_runs_keep_the_exact_fire_time_as_key(node_factory: Any) -> None:
    """With jitter a run starts a little late but is keyed by its exact fire time."""
    node, sched, events = await make(node_factory, {"name": "tick", "every": "1s",
                                                    "jitter": "300ms", "steps": LIST})
    background = await run_services(sched.run, node.worker.run)
    try:
        await events.wait(lambda: len(events.kinds("completed")) >= 2)
    finally:
        await stop(background)
    tasks = await tasks_of(node, "tick")
    assert all(t.fire_time is not None and t.fire_time.microsecond == 0 for t in tasks)
    assert len({t.fire_time for t in tasks}) == len(tasks)


async def test_missed_ticks_within_grace_run_once_at_start(node_factory: Any) -> None:
    """A per-minute schedule started mid-minute runs the missed tick once, never a burst."""
    node, sched, events = await make(node_factory, {"name": "minutely", "cron": "* * * * *",
                                                    "misfire_grace": "5m", "steps": LIST})
    started = datetime.now(UTC)
    background = await run_services(sched.run)
    try:
        await events.wait(lambda: bool(events.kinds("queued")), timeout=5)
    finally:
        await stop(background)
    minute = started.replace(second=0, microsecond=0)
    fires = [t.fire_time for t in await tasks_of(node, "minutely")]
    assert fires in ([minute], [minute + timedelta(minutes=1)])


async def test_missed_ticks_outside_grace_are_dropped(node_factory: Any) -> None:
    """A tick missed by more than misfire_grace is not run at start."""
    far = (datetime.now(UTC) + timedelta(hours=12)).hour
    node, sched, _ = await make(node_factory, {"name": "daily", "cron": f"0 {far} * * *",
                                               "misfire_grace": "5m", "steps": LIST})
    background = await run_services(sched.run)
    try:
        await asyncio.wait_for(sched.started.wait(), 5)
        await asyncio.sleep(0.3)  # give a wrongly due job the chance to run
    finally:
        await stop(background)
    assert await tasks_of(node, "daily") == []


# -- several nodes on one database -----------------------------------------------------------------


async def three_nodes(node_factory: Any, store_url: str, schedule: dict[str, Any]
                      ) -> tuple[list[tuple[Node, Scheduler]], Events]:
    """Three daemons (own store, engine, scheduler) on one database; one event recorder."""
    events = Events()
    nodes = []
    for n in range(3):
        node, sched, _ = await make(node_factory, schedule, database=store_url,
                                    overrides={"daemon": {"node_id": f"node-{n}"}})
        node.listener.add(events)
        nodes.append((node, sched))
    return nodes, events


async def test_three_nodes_firing_at_once_record_one_task(node_factory: Any,
                                                          store_url: str) -> None:
    """Three schedulers firing the same time concurrently: exactly one task."""
    nodes, events = await three_nodes(node_factory, store_url, NIGHTLY)
    results = await asyncio.gather(*(s.fire("nightly", T) for _, s in nodes))
    assert sum(r is not None for r in results) == 1
    assert len(await tasks_of(nodes[0][0], "nightly")) == 1
    assert len(events.kinds("queued")) == 1


async def test_three_daemons_record_each_fire_time_once(node_factory: Any,
                                                        store_url: str) -> None:
    """Three APSchedulers + workers on one database: one task per fire time."""
    nodes, events = await three_nodes(node_factory, store_url, {"name": "tick", "every": "1s",
                                                               "steps": LIST})
    background = await run_services(*[s.run for _, s in nodes], *[n.worker.run for n, _ in nodes])
    try:
        await events.wait(lambda: len({t.fire_time for t in events.kinds("completed")}) >= 2,
                          timeout=8)
    finally:
        await stop(background)
    counts = Counter(t.fire_time for t in await tasks_of(nodes[0][0], "tick"))
    assert len(counts) >= 2
    assert set(counts.values()) == {1}, counts
