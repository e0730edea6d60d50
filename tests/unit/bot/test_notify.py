"""Team notifications: one line per event, bursts folded into one digest per channel."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from signoff.bot.notify import (
    CONTENT_LIMIT,
    DIGEST_LIMIT,
    Notifier,
    NotifyRule,
    digest_text,
    event_line,
)
from signoff.bot.outbox import FOREVER
from signoff.runtime.clock import FakeClock
from signoff.runtime.models import Action, ActionRecord, RunMode, Task, TaskState
from signoff.runtime.schedule.scheduler import Scheduler
from signoff.runtime.store.memory import MemTaskStore
from signoff.runtime.store.port import OutboxItem
from signoff.runtime.tools.registry import builtin_registry

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ALL = frozenset({"queued", "completed", "failed", "blocked", "waiting_approval", "skipped",
                 "escalated"})


def task(n: int = 1, **kw: Any) -> Task:
    """A task with a recognisable goal."""
    return Task(id=f"t{n}", goal=f"goal number {n}", **kw)


def notifier(store: MemTaskStore, clock: FakeClock, *rules: NotifyRule, **kw: Any) -> Notifier:
    """A notifier on a memory store, one team channel unless rules are given."""
    chosen = rules or (NotifyRule(platform="slack", channel="C-team", events=ALL),)
    return Notifier(store=store, clock=clock, rules=chosen, console_url="https://so.example",
                    **kw)


async def outbox(store: MemTaskStore) -> list[OutboxItem]:
    """Every undelivered outbox item."""
    return await store.due_outbox(FOREVER, limit=1000)


def test_line_links_to_the_console() -> None:
    """A line has an icon, the event, the goal, the schedule and a console link."""
    line = event_line("completed", task(schedule="nightly"), None,
                      console_url="https://so.example/")
    assert line == "✅ completed: goal number 1 (schedule nightly) [https://so.example/console/tasks/t1]"


def test_line_hides_content_unless_asked() -> None:
    """Message content stays out of team channels unless include_content is set."""
    action = builtin_registry(entry_points_group=None).prepare(Action(
        tool="send_email", args={"to": "ops@example.com", "subject": "Payroll", "body": "b"}))
    waiting = task(pending_action=action)
    bare = event_line("waiting_approval", waiting, None, console_url=None)
    full = event_line("waiting_approval", waiting, None, console_url=None, include_content=True)
    assert "send_email → ops@example.com" in bare and "Payroll" not in bare
    assert "Payroll" in full


def test_include_content_shows_bodies_and_payloads_shortened() -> None:
    """With include_content the line carries the body, the payload and the text, each cut
    to CONTENT_LIMIT characters; without it none of them."""
    long_body = "Salaries attached. " + "x" * 1000
    registry = builtin_registry(entry_points_group=None)
    mail = registry.prepare(Action(tool="send_email", args={
        "to": "ops@example.com", "subject": "Payroll", "body": long_body}))
    hook = registry.prepare(Action(tool="send_webhook", args={
        "url": "https://h.example/x", "payload": {"deploy": "v2"}}))
    for action, words in ((mail, "Salaries attached."), (hook, '{"deploy": "v2"}')):
        waiting = task(pending_action=action)
        full = event_line("waiting_approval", waiting, None, console_url=None,
                          include_content=True)
        bare = event_line("waiting_approval", waiting, None, console_url=None)
        assert words in full, full
        assert words not in bare
    full = event_line("waiting_approval", task(pending_action=mail), None, console_url=None,
                      include_content=True)
    body = full.split("body: ", 1)[1].split(" [", 1)[0]
    assert len(body) == CONTENT_LIMIT and body.endswith("…")


def test_blocked_by_cron_mode_says_what_it_would_have_needed() -> None:
    """A scheduled run blocked by cron_mode names the action and how to allow it."""
    blocked = task(mode=RunMode.SCHEDULED, schedule="nightly", state=TaskState.FAILED,
                   actions=[ActionRecord(step=0, tool="send_email", decision="block",
                                         decided_by="auto:cron_mode", outcome="blocked",
                                         targets=["ops@example.com"],
                                         error="needs approval but cron_mode is deny")])
    line = event_line("blocked", blocked, "blocked: needs approval", console_url=None)
    assert ("would have needed approval: send_email to ops@example.com; "
            "set cron_mode or add a grant") in line


def test_blocked_by_a_prohibition_does_not_suggest_an_approval() -> None:
    """A prohibition cannot be approved, so the line gives the reason instead."""
    blocked = task(mode=RunMode.SCHEDULED, schedule="nightly",
                   actions=[ActionRecord(step=0, tool="delete_file", decision="block",
                                         decided_by="auto:policy", outcome="blocked",
                                         targets=["report.txt"],
                                         error="prohibited by policy (DESTRUCTIVE)")])
    line = event_line("blocked", blocked, None, console_url=None)
    assert "would have needed" not in line
    assert "delete_file → report.txt: prohibited by policy (DESTRUCTIVE)" in line


async def test_burst_in_one_channel_becomes_one_digest() -> None:
    """Five events within the window are written as ONE message: "5 events: …"."""
    store, clock = MemTaskStore(), FakeClock(T0)
    note = notifier(store, clock)
    kinds = ["completed", "failed", "completed", "queued", "completed"]
    for n, kind in enumerate(kinds):
        await note.task_event(kind, task(n), "tool failed" if kind == "failed" else None)
        clock.advance(0.5)
    assert await outbox(store) == []  # nothing is written while the window is open
    assert await note.flush(T0 + timedelta(seconds=2.9)) == 0
    assert await note.flush(T0 + timedelta(seconds=3)) == 1
    [item] = await outbox(store)
    text = item.payload["text"]
    assert text.startswith("5 events:\n✅ completed: goal number 0")
    assert text.count("\n") == 5 and "❌ failed: goal number 1" in text
    assert (item.surface, item.kind, item.payload["channel"]) == ("slack", "notify", "C-team")


async def test_single_event_is_sent_as_its_line() -> None:
    """An event alone in its window is sent as the plain line."""
    store, clock = MemTaskStore(), FakeClock(T0)
    note = notifier(store, clock)
    await note.task_event("completed", task())
    await note.flush(T0 + timedelta(seconds=3))
    [item] = await outbox(store)
    assert item.payload["text"].startswith("✅ completed: goal number 1")


async def test_each_channel_gets_its_own_digest() -> None:
    """Two channels: one item each, with only the events each subscribed to."""
    store, clock = MemTaskStore(), FakeClock(T0)
    note = notifier(store, clock,
                    NotifyRule("slack", "C-team", frozenset({"completed", "failed"})),
                    NotifyRule("telegram", "-100", frozenset({"failed"})))
    await note.task_event("completed", task(1))
    await note.task_event("failed", task(2), "boom")
    assert note.pending() == 3
    assert await note.flush(T0 + timedelta(seconds=5)) == 2
    items = {i.surface: i.payload["text"] for i in await outbox(store)}
    assert items["slack"].startswith("2 events:")
    assert items["telegram"].startswith("❌ failed: goal number 2")


async def test_a_new_window_opens_after_a_flush() -> None:
    """Events after a flush go into the next message, not the sent one."""
    store, clock = MemTaskStore(), FakeClock(T0)
    note = notifier(store, clock)
    await note.task_event("completed", task(1))
    await note.flush(T0 + timedelta(seconds=3))
    clock.advance(10)
    await note.task_event("completed", task(2))
    await note.task_event("completed", task(3))
    await note.flush(clock.now() + timedelta(seconds=3))
    texts = [i.payload["text"] for i in await outbox(store)]
    assert len(texts) == 2 and texts[1].startswith("2 events:")


async def test_zero_window_writes_at_once() -> None:
    """window = 0 turns folding off: every event is written immediately."""
    store, clock = MemTaskStore(), FakeClock(T0)
    flushed: list[int] = []
    note = notifier(store, clock, window=timedelta(0), on_flush=lambda: flushed.append(1))
    await note.task_event("completed", task(1))
    await note.task_event("failed", task(2))
    assert len(await outbox(store)) == 2 and flushed == [1, 1]


async def test_unsubscribed_events_are_dropped() -> None:
    """Events a channel did not ask for never reach it."""
    store, clock = MemTaskStore(), FakeClock(T0)
    note = notifier(store, clock, NotifyRule("slack", "C", frozenset({"failed"})))
    await note.task_event("completed", task())
    assert note.pending() == 0 and await note.flush(force=True) == 0


async def test_the_same_event_from_two_nodes_is_written_once() -> None:
    """Two nodes reporting the same skip (alone in their windows) make one outbox row."""
    store, clock = MemTaskStore(), FakeClock(T0)
    running = task(state=TaskState.WAITING_APPROVAL, schedule="nightly")
    for _ in range(2):
        note = notifier(store, clock)
        await note.task_event("skipped", running, "run due 2026-11-30 12:00:00 UTC skipped")
        await note.flush(force=True)
    [item] = await outbox(store)
    assert "⏭ skipped" in item.payload["text"]


async def test_run_flushes_on_its_tick_and_on_cancel() -> None:
    """`run` writes closed windows on its own and what is left when cancelled."""
    store, clock = MemTaskStore(), FakeClock(T0)
    note = notifier(store, clock, tick=0.01)
    runner = asyncio.create_task(note.run())
    await note.task_event("completed", task(1))
    clock.advance(3)
    for _ in range(100):
        if await outbox(store):
            break
        await asyncio.sleep(0.01)
    assert len(await outbox(store)) == 1
    await note.task_event("completed", task(2))  # window still open at cancel time
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert len(await outbox(store)) == 2


def test_long_digests_are_capped() -> None:
    """A huge burst shows the first lines and counts the rest."""
    text = digest_text([f"line {n}" for n in range(DIGEST_LIMIT + 5)])
    assert text.startswith(f"{DIGEST_LIMIT + 5} events:")
    assert text.endswith("… and 5 more")


async def test_real_skip_notice_names_the_running_task(node_factory: Any) -> None:
    """A schedule skipped behind a waiting run posts which run blocks it."""
    store = MemTaskStore()
    node = await node_factory({"schedules": [{"name": "nightly", "every": "1h",
                                              "steps": [{"tool": "list_dir",
                                                         "args": {"path": "."}}]}]},
                              store=store, clock=FakeClock(T0))
    note = notifier(store, FakeClock(T0))
    node.listener.add(note)
    sched = Scheduler(engine=node.engine,
                      schedules=[s.to_runtime() for s in node.settings.schedules])
    first = await sched.fire("nightly", T0)
    assert first is not None
    assert await sched.fire("nightly", T0 + timedelta(hours=1)) is None
    await note.flush(force=True)
    texts = [i.payload["text"] for i in await outbox(store) if i.kind == "notify"]
    assert any(f"run due 2026-11-30 13:00:00 UTC skipped: the previous run {first.id} "
               "is still queued" in t for t in texts)


async def test_the_audit_head_is_posted_once_a_day_per_channel() -> None:
    """Channels subscribed to audit_head get COUNT:HASH once per UTC day."""
    store, clock = MemTaskStore(), FakeClock()
    rules = [NotifyRule(platform="slack", channel="C1", events=frozenset({"audit_head"})),
             NotifyRule(platform="slack", channel="C2", events=frozenset({"completed"}))]
    notifier = Notifier(store=store, clock=clock, rules=rules)
    assert await notifier.post_audit_head(7, "ab" * 32) == 1
    await notifier.post_audit_head(7, "ab" * 32)
    clock.advance(3600)
    await notifier.post_audit_head(8, "cd" * 32)
    items = await store.due_outbox(FOREVER)
    assert [i.payload["channel"] for i in items] == ["C1"]
    assert f"7:{'ab' * 32}" in items[0].payload["text"]
    clock.advance(86400)
    await notifier.post_audit_head(9, "ef" * 32)
    assert len(await store.due_outbox(FOREVER)) == 2
