"""Scheduled goals: APScheduler only records that a run is due; the worker runs it.

Each ``[[schedules]]`` entry becomes a job of an `AsyncIOScheduler` in the daemon's loop,
with the in-memory job store only: APScheduler's FAQ forbids sharing job stores between
schedulers, and the definitions live in the config anyway. A fire inserts a queued task
under the unique key (schedule, fire_time); when several daemons share a database, each
fires and exactly one insert wins (the others get None back and do nothing). The fire
time is the trigger's own un-jittered time, truncated to the second, in UTC, so every
node computes the same key.

A schedule whose previous run is still going (queued, planning, in progress or waiting
for approval) is skipped, visibly: a ``schedule_skipped`` log line and a ``skipped``
notification about the run that is still going (see `Scheduler.fire`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from signoff.errors import BadArguments, ConfigError, StoreError, StoreUnavailable
from signoff.runtime.clock import Clock
from signoff.runtime.engine import Engine
from signoff.runtime.events import TaskEvent
from signoff.runtime.models import JsonDict, RunMode, Task, TaskState
from signoff.runtime.outages import Backoff, failing
from signoff.runtime.refusals import outcome_words
from signoff.runtime.schedule.cron import (
    fire_times,
    next_fire_times,
    previous_fire_time,
    schedule_trigger,
)
from signoff.runtime.schedule.durations import format_duration
from signoff.runtime.schedule.spec import Schedule

__all__ = ["ACTIVE_STATES", "Scheduler", "schedule_timeouts"]

log = logging.getLogger(__name__)
MAX_COALESCED_LOGGED = 100  # lines per late call (a day's downtime is not a log flood)

ACTIVE_STATES = frozenset({TaskState.QUEUED, TaskState.PLANNING, TaskState.IN_PROGRESS,
                           TaskState.WAITING_APPROVAL})


def schedule_timeouts(schedules: Sequence[Schedule]) -> Callable[[Task], timedelta | None]:
    """For the engine: a scheduled task's approval timeout (None: the global one)."""
    table = {s.name: s.timeout for s in schedules if s.timeout is not None}

    def timeout_for(task: Task) -> timedelta | None:
        return table.get(task.schedule or "") if task.mode is RunMode.SCHEDULED else None

    return timeout_for


class Scheduler:
    """Fires the configured schedules into the engine's store."""

    def __init__(self, *, engine: Engine, schedules: Sequence[Schedule],
                 clock: Clock | None = None, wake: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self.clock = clock or engine.clock
        self.wake = wake  # e.g. Worker.wake: start a recorded run without polling delay
        self.schedules = {s.name: s for s in schedules}
        for i, sched in enumerate(schedules):
            actions = sched.actions()
            if actions is not None:
                try:  # an unknown tool in a schedule is a config error, found at start
                    engine.prepare_steps(actions)
                except BadArguments as exc:
                    raise ConfigError(f"schedules[{i}].{exc}") from exc
        # Un-jittered triggers: the fire-time key must be the same on every node.
        self._exact = {s.name: schedule_trigger(cron=s.cron, every=s.every,
                                                timezone=s.zone.key) for s in schedules}
        self.started = asyncio.Event()
        self._aps: AsyncIOScheduler | None = None
        self._fired: dict[str, datetime] = {}  # the last fire time each job found

    def job_ids(self) -> list[str]:
        """The schedules APScheduler is firing right now (empty when not running)."""
        return [job.id for job in self._aps.get_jobs()] if self._aps is not None else []

    # -- running -------------------------------------------------------------------------
    async def run(self) -> None:
        """Start APScheduler in this loop, wait until cancelled, then shut it down."""
        aps = AsyncIOScheduler(timezone=UTC, jobstores={"default": MemoryJobStore()},
                               executors={"default": AsyncIOExecutor()})
        now = datetime.now(UTC)  # wall clock: APScheduler fires on wall time (missed ticks too)
        for sched in self.schedules.values():
            if not sched.enabled:
                continue
            grace = sched.misfire_grace
            extra: dict[str, Any] = {}
            # The job store starts empty, so APScheduler alone would never know about a
            # tick missed while the daemon was down. Starting the job at the latest tick
            # within misfire_grace lets it run that tick once; the unique key makes it a
            # no-op when the previous life already recorded it.
            missed = previous_fire_time(self._exact[sched.name], now, grace)
            if missed is not None:
                extra["next_run_time"] = missed
            aps.add_job(
                self._job, args=(sched.name,), id=sched.name, name=f"schedule:{sched.name}",
                trigger=schedule_trigger(cron=sched.cron, every=sched.every,
                                         timezone=sched.zone.key, jitter=sched.jitter),
                # Chosen, not defaulted: a fire more than misfire_grace late is dropped;
                # several overdue fires coalesce into one (never a burst after downtime
                # or a stalled loop); one instance at a time, since a fire only inserts
                # a row and a second one in flight could only be a duplicate.
                misfire_grace_time=max(1, int(grace.total_seconds())),
                coalesce=True, max_instances=1, replace_existing=True, **extra)
        aps.start()
        self._aps = aps
        self.started.set()
        log.info("scheduler_started", extra={"schedules": len(aps.get_jobs())})
        try:
            await asyncio.Event().wait()
        finally:
            aps.shutdown(wait=False)
            self._aps = None
            self.started.clear()

    async def _job(self, name: str) -> None:
        """APScheduler's job: find the scheduled time again and record the run."""
        sched = self.schedules[name]
        jitter = sched.jitter or timedelta()
        window = sched.misfire_grace + jitter
        if sched.every is not None:
            window = min(window, sched.every + jitter)
        wall = datetime.now(UTC)  # wall clock: APScheduler called us at a wall-clock tick
        fire_time = previous_fire_time(self._exact[name], wall, window)
        if fire_time is None:  # pragma: no cover - APScheduler fired outside the grace
            log.warning("schedule_fire_time_unknown", extra={"schedule": name})
            return
        self._log_coalesced(name, fire_time)
        await self._fire_through_outage(name, fire_time, until=fire_time + window)

    async def _fire_through_outage(self, name: str, fire_time: datetime, *,
                                   until: datetime) -> None:
        """Record the run, retrying while the database is away (until the fire's grace
        window closes): a restart of the database must not cost a fire. Retrying is safe:
        a run's key is unique per fire time, so a fire recorded before its answer was
        lost is found, not queued twice."""
        backoff, label = Backoff(first=0.2, maximum=5.0), f"schedule:{name}"
        try:
            while True:
                try:
                    await self.fire(name, fire_time)
                    return
                except StoreUnavailable as exc:
                    if self.engine.clock.now() >= until:
                        log.warning("schedule_fire_lost", extra={"schedule": name,
                                                                 "error": str(exc)})
                        return
                    failing(label, exc, self.engine.outages)
                    await asyncio.sleep(backoff.next())
        except Exception:  # one bad fire must not stop the schedule
            log.exception("schedule_fire_failed", extra={"schedule": name})
        finally:
            self.engine.outages.recovered(label)

    def _log_coalesced(self, name: str, fire_time: datetime) -> None:
        """Name the fire times this node's job let pass: called late (a stalled loop),
        APScheduler runs overdue fires once (``coalesce``) and the job takes the latest
        tick, so the ones between were not fired here. Another node may have recorded
        them; if none did, this line is where they show."""
        last, self._fired[name] = self._fired.get(name), fire_time
        if last is None or fire_time <= last:
            return
        for n, tick in enumerate(fire_times(self._exact[name], last + timedelta(microseconds=1))):
            if tick >= fire_time or n >= MAX_COALESCED_LOGGED:
                break
            log.info("schedule_coalesced", extra={"schedule": name,
                                                  "fire_time": tick.isoformat()})

    # -- one fire --------------------------------------------------------------------------
    def _get(self, name: str) -> Schedule:
        try:
            return self.schedules[name]
        except KeyError:
            known = ", ".join(self.schedules) or "none"
            raise ValueError(f"no schedule named {name!r} (known: {known})") from None

    async def fire(self, name: str, fire_time: datetime) -> Task | None:
        """Record one due run of ``name``; None if skipped, disabled or already recorded.

        The skip notice is an ordinary ``task_event("skipped", …)`` about the run that is
        still going, so it reaches the same listeners (team channels, metrics) and links to
        the task someone has to look at; the detail names the fire time that was skipped.
        """
        sched = self._get(name)
        if not sched.enabled:
            return None
        fire_time = fire_time.astimezone(UTC).replace(microsecond=0)
        running = await self._still_running(name, fire_time)
        if running is not None:
            when = fire_time.strftime("%Y-%m-%d %H:%M:%S UTC")
            detail = (f"run due {when} skipped: the previous run {running.id} is still "
                      f"{running.state.value}")
            log.warning("schedule_skipped", extra={
                "schedule": name, "fire_time": fire_time.isoformat(),
                "task_id": running.id, "state": running.state.value})
            await self.engine.listener.task_event(TaskEvent.SKIPPED, running, detail)
            return None
        task = await self._submit(sched, fire_time=fire_time)
        if task is None:
            log.debug("schedule_fire_taken", extra={"schedule": name,
                                                    "fire_time": fire_time.isoformat()})
        else:
            log.info("schedule_fired", extra={"schedule": name, "task_id": task.id,
                                              "fire_time": fire_time.isoformat()})
        return task

    async def _still_running(self, name: str, fire_time: datetime) -> Task | None:
        page = await self.engine.store.list_tasks(schedule=name, limit=5)
        for task in page.items:
            # The same fire time recorded by another node is not a "previous" run.
            if task.state in ACTIVE_STATES and task.fire_time != fire_time:
                return task
        return None

    async def _submit(self, sched: Schedule, *, fire_time: datetime | None,
                      submitted_by: str | None = None) -> Task | None:
        task = await self.engine.submit(
            sched.goal, steps=sched.actions(), prohibit=list(sched.prohibit),
            mode=RunMode.SCHEDULED, schedule=sched.name, fire_time=fire_time,
            cron_mode=str(sched.cron_mode) if sched.cron_mode else None,
            submitted_by=submitted_by, schedule_definition=sched.definition)
        if task is not None and self.wake is not None:
            self.wake()
        return task

    async def run_now(self, name: str, *, submitted_by: str | None = None) -> Task:
        """Queue a run of ``name`` now (also for a disabled schedule, and even while a
        previous run is going: a person asked for it). It has no fire time, so it never
        collides with the cron key."""
        task = await self._submit(self._get(name), fire_time=None, submitted_by=submitted_by)
        if task is None:  # pragma: no cover - only fire-time keys can collide
            raise StoreError(f"could not queue a run of schedule {name!r}")
        return task

    # -- reporting -------------------------------------------------------------------------
    def describe(self, now: datetime | None = None, *, count: int = 3) -> list[JsonDict]:
        """Each schedule with its next ``count`` fire times (UTC and the schedule's zone)."""
        at = now or self.clock.now()
        default_mode = self.engine.config.unattended.cron_mode
        out: list[JsonDict] = []
        for sched in self.schedules.values():
            upcoming = next_fire_times(self._exact[sched.name], at, count) if sched.enabled else []
            out.append({
                "name": sched.name, "enabled": sched.enabled, "cron": sched.cron,
                "every": format_duration(sched.every) if sched.every is not None else None,
                "timezone": sched.zone.key, "goal": sched.goal,
                "cron_mode": str(sched.cron_mode or default_mode),
                "next_utc": [t.isoformat() for t in upcoming],
                "next_local": [t.astimezone(sched.zone).isoformat() for t in upcoming],
            })
        return out

    async def status(self, now: datetime | None = None, *, count: int = 3) -> list[JsonDict]:
        """`describe` plus each schedule's last run and its outcome, from the store."""
        rows = self.describe(now, count=count)
        for row in rows:
            page = await self.engine.store.list_tasks(schedule=row["name"], limit=1)
            last = page.items[0] if page.items else None
            row["last_run"] = _last_run(last) if last is not None else None
        return rows


def _last_run(task: Task) -> JsonDict:
    if task.state is TaskState.COMPLETED:
        outcome = outcome_words(task.state.value, task.result)
    elif task.state is TaskState.FAILED:
        outcome = str((task.result or {}).get("reason") or "failed")
    else:
        outcome = task.state.value
    return {"task_id": task.id, "state": task.state.value, "outcome": outcome,
            "fire_time": task.fire_time.isoformat() if task.fire_time else None,
            "created_at": task.created_at.isoformat()}
